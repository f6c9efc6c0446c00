"""The graph a reader is shown is learned from passages it may read (docs/permissions.md, "The graph"),
on both graph stores: PostgreSQL's tables and a real Neo4j (``tests.servers``).

A hidden passage relates the PPR-9087 lock to the KT-2210 kettle through the Zephyr Labs chip; two
public passages name the lock and the kettle apart. To a reader who may not read the hidden passage,
the graph holds no Zephyr Labs and no relation between the lock and the kettle: a graph search for the
lock finds its public passage only and its path names nothing else. A reader who may read it is walked from the lock to the kettle. The expected answers are
written here by hand.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from engines import registry
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base
from knowledge.stores import graph_store
from tenants.services import create_api_key
from tests.conftest import client_with_key
from tests.factories import TenantFactory, give_unlimited_rate_tier

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

FILES = {
    "lock.txt": ("The PPR-9087 door lock is sold online by Skyline Home.", None),
    "kettle.txt": ("The KT-2210 kettle boils water in four minutes.", None),
    "secret.txt": ("The PPR-9087 door lock and the KT-2210 kettle share the Zephyr Labs chip.", ["group:hr"]),
}


@pytest.fixture(params=["postgres", "neo4j"])
def store(request, settings) -> Iterator[str]:
    """The graph store of the test: PostgreSQL's tables, or the run's real Neo4j (its data dropped after)."""
    if request.param == "neo4j":
        settings.NEO4J_URL = request.getfixturevalue("neo4j_url")
    registry.graph_store.cache_clear()
    assert (type(graph_store()).__name__ == "Neo4jGraphStore") is (request.param == "neo4j")
    yield request.param
    if request.param == "neo4j":
        from knowledge.models import KnowledgeBaseVersion

        for tenant_id, version_id in KnowledgeBaseVersion.objects.values_list("knowledge_base__tenant_id", "pk"):
            graph_store().drop_version(tenant_id, version_id)
        settings.NEO4J_URL = ""
    registry.graph_store.cache_clear()


@pytest.fixture
def kb(store, embedder, tmp_path):
    tenant = TenantFactory()
    give_unlimited_rate_tier(tenant)
    for name, (text, acl) in FILES.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        if acl is not None:
            (tmp_path / f"{name}.meta.json").write_text(json.dumps({"acl": acl}), encoding="utf-8")
    kb = create_knowledge_base(tenant=tenant, name="graph acl", chunk_size=120, chunk_overlap=0)
    report = Ingester(kb).ingest(discover_files([tmp_path]))
    assert not report.failures, report.failures
    kb.refresh_from_db()
    return kb


def _graph_search(kb, principals: list[str] | None, query: str, **extra) -> dict:
    key = create_api_key(tenant=kb.tenant, principals=principals or [])
    body = {"query": query, "mode": "graph", "kb_ids": [kb.pk], "top_k": 20, "hops": 2, **extra}
    response = client_with_key(key.raw_key).post(
        "/api/v1/retrieval/search", data=json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 200, response.content
    answer = response.json()
    assert answer["degraded"] == [], answer["degraded"]
    return answer


def _names(answer: dict) -> set[str]:
    return {Path(hit["source_uri"]).name for hit in answer["results"]}


def test_a_reader_is_walked_only_through_what_it_may_read(kb):
    member = _graph_search(kb, ["group:hr"], "PPR-9087")
    assert _names(member) == {"lock.txt", "kettle.txt", "secret.txt"}  # the hidden passage relates them
    plain = _graph_search(kb, None, "PPR-9087")
    assert _names(plain) == {"lock.txt"}
    text = json.dumps(plain)
    assert "Zephyr" not in text and "KT-2210" not in text, text
    (hit,) = plain["results"]
    assert hit["retrievers"]["graph"]["path"] == ["PPR-9087"]


def test_a_query_entity_known_only_from_hidden_passages_is_absent(kb):
    member = _graph_search(kb, ["group:hr"], "Zephyr Labs")
    assert "kettle.txt" in _names(member) and "lock.txt" in _names(member)
    plain = _graph_search(kb, None, "Zephyr Labs")
    assert plain["results"] == []
    assert "Zephyr" not in json.dumps(plain["results"])


def test_a_community_naming_an_entity_known_only_from_hidden_passages_is_not_shown(kb, monkeypatch, settings):
    """Global search: a community is shown only if its supporting passages are readable and each key
    entity it names is mentioned by a readable passage. With one supporting passage per community, the
    community holding the lock, the kettle and Zephyr Labs may be supported by a public passage alone,
    yet names Zephyr Labs."""
    from graph import community_build

    monkeypatch.setattr(community_build, "SUPPORTING_CHUNKS", 1)
    settings.GRAPH_COMMUNITY_MIN_SIZE = 2  # a corpus of three passages makes small communities
    assert community_build.rebuild_communities(kb.active_version) > 0

    def global_search(principals: list[str] | None) -> dict:
        key = create_api_key(tenant=kb.tenant, principals=principals or [])
        body = {"query": "PPR-9087 KT-2210 Zephyr Labs door lock kettle chip", "scope": "global", "top_k": 50}
        response = client_with_key(key.raw_key).post(
            "/api/v1/retrieval/graph", data=json.dumps(body), content_type="application/json"
        )
        assert response.status_code == 200, response.content
        return response.json()

    member = global_search(["group:hr"])
    assert any("Zephyr Labs" in c["key_entities"] for c in member["communities"]), member
    plain = global_search(None)
    assert "Zephyr" not in json.dumps(plain), plain
