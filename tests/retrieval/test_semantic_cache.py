"""The semantic cache over the real embedded Redis, PostgreSQL + pgvector and the real MiniLM: paraphrases
hit, near misses and BM25 never do, it is off by default, scoped per tenant and per KB revision."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from engines.embedders import get_embedder
from knowledge.knowledge_bases import update_search_settings
from knowledge.models import KnowledgeBase, Synonym
from knowledge.revisions import bump_revisions
from retrieval.models import SemanticCacheEntry
from retrieval.serializers import SearchOutput
from retrieval.tasks import purge_semantic_cache
from tests.conftest import client_for
from tests.factories import TenantFactory
from tests.retrieval.test_cache import GARDEN, KETTLE, ingest, post

ASKED = "How long does the electric kettle take to boil water?"
PARAPHRASE = "How long does the electric kettle need to boil water?"
LITRES = "Does the electric kettle boil 1.7 litres of water?"
OTHER_LITRES = "Does the electric kettle boil 1.2 litres of water?"


def on(tenant) -> KnowledgeBase:
    kb = KnowledgeBase.objects.get(tenant=tenant, name="manuals")
    update_search_settings(kb, {"semantic_cache": True})
    return kb


@pytest.fixture
def manuals(tmp_path, tenant, embedder):
    """The tenant's KB "manuals" (the kettle and the garden), its semantic cache off as by default."""
    ingest(tmp_path / "manuals", tenant, {"kettle.txt": KETTLE, "garden.txt": GARDEN})
    return KnowledgeBase.objects.get(tenant=tenant, name="manuals")


def ask(client, query: str, path: str = "hybrid", **options) -> dict:
    return post(client, {"query": query, "top_k": 5, **options}, path)


@pytest.mark.slow
@pytest.mark.django_db
def test_a_paraphrase_is_answered_with_the_cached_querys_answer(manuals, tenant, pipeline_runs):
    on(tenant)
    client = client_for(tenant)
    first = ask(client, ASKED)
    assert first["cached"] is False and "cache" not in first
    second = ask(client, PARAPHRASE)
    assert second["cached"] == "semantic"
    assert second["cache"]["kind"] == "semantic" and second["cache"]["query"] == ASKED
    assert django_settings.SEMANTIC_CACHE_MIN_COSINE <= second["cache"]["cosine"] <= 1
    assert second["results"] == first["results"] and second["queries"] == first["queries"]
    assert SearchOutput(data=second).is_valid(), SearchOutput(data=second).errors
    assert json.dumps(SearchOutput(second).data, sort_keys=True) == json.dumps(second, sort_keys=True)
    assert len(pipeline_runs) == 1
    exact = ask(client, ASKED)  # an exact hit keeps its shape
    assert exact["cached"] is True and "cache" not in exact
    assert [row.query for row in SemanticCacheEntry.objects.filter(tenant=tenant)] == [ASKED]


@pytest.mark.slow
@pytest.mark.django_db
def test_queries_that_differ_in_a_number_never_share_an_entry(manuals, tenant, pipeline_runs):
    on(tenant)
    client = client_for(tenant)
    vectors = get_embedder().embed_queries([LITRES, OTHER_LITRES])
    assert float(vectors[0] @ vectors[1]) > 0.9  # close enough by cosine alone: the signature keeps them apart
    assert ask(client, LITRES)["cached"] is False
    assert ask(client, OTHER_LITRES)["cached"] is False
    assert len(pipeline_runs) == 2


@pytest.mark.slow
@pytest.mark.django_db
def test_it_is_off_by_default(manuals, tenant, pipeline_runs):
    assert "semantic_cache" not in manuals.search_settings
    client = client_for(tenant)
    assert ask(client, ASKED)["cached"] is False and ask(client, PARAPHRASE)["cached"] is False
    assert not SemanticCacheEntry.objects.exists() and len(pipeline_runs) == 2


@pytest.mark.slow
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "options"), [("bm25", {}), ("graph", {}), ("hybrid", {"weights": {"vector": 0, "bm25": 1}})]
)
def test_searches_without_a_dense_leg_never_use_it(manuals, tenant, pipeline_runs, path, options):
    on(tenant)
    client = client_for(tenant)
    assert ask(client, ASKED, path, **options)["cached"] is False
    assert ask(client, PARAPHRASE, path, **options)["cached"] is False
    assert not SemanticCacheEntry.objects.exists() and len(pipeline_runs) == 2


@pytest.mark.slow
@pytest.mark.django_db
def test_another_tenants_identical_query_never_hits(tmp_path, manuals, tenant, embedder, pipeline_runs):
    other = TenantFactory()
    ingest(tmp_path / "other", other, {"kettle.txt": KETTLE, "garden.txt": GARDEN})
    on(tenant)
    on(other)
    assert ask(client_for(tenant), ASKED)["cached"] is False
    assert ask(client_for(other), ASKED)["cached"] is False
    assert ask(client_for(other), PARAPHRASE)["cached"] == "semantic"  # its own entry, not the first tenant's
    assert SemanticCacheEntry.objects.filter(tenant=other).count() == 1


@pytest.mark.slow
@pytest.mark.django_db
def test_a_revision_or_vocabulary_change_makes_old_entries_unreachable(manuals, tenant, pipeline_runs):
    kb = on(tenant)
    client = client_for(tenant)
    ask(client, ASKED)
    bump_revisions([kb.active_version_id])
    assert ask(client, PARAPHRASE)["cached"] is False
    assert ask(client, ASKED)["cached"] == "semantic"  # the paraphrase's entry, under the new revision
    Synonym.objects.create(tenant=tenant, terms=["kettle"], replacements=["boiler"])  # a new vocabulary stamp
    assert ask(client, PARAPHRASE)["cached"] is False
    assert len(pipeline_runs) == 3


@pytest.mark.slow
@pytest.mark.django_db
def test_other_options_make_another_scope(manuals, tenant, pipeline_runs):
    on(tenant)
    client = client_for(tenant)
    ask(client, ASKED)
    assert ask(client, PARAPHRASE, top_k=3)["cached"] is False
    assert ask(client, PARAPHRASE, path="vector")["cached"] is False
    assert len(pipeline_runs) == 3


@pytest.mark.slow
@pytest.mark.django_db
def test_a_miss_embeds_its_query_once(manuals, tenant, monkeypatch):
    on(tenant)
    embedder, embedded = get_embedder(), []
    original = embedder.embed_queries
    monkeypatch.setattr(embedder, "embed_queries", lambda texts: embedded.append(list(texts)) or original(texts))
    body = ask(client_for(tenant), ASKED)
    assert body["cached"] is False and embedded == [[ASKED]]
    assert {"embed", "semantic_cache"} <= set(body["timings_ms"])
    path = body["critical_path_ms"]  # the lookup is on the request thread's path, inside the total
    assert sum(path.values()) == pytest.approx(body["timings_ms"]["total"], abs=0.05)


@pytest.mark.slow
@pytest.mark.django_db
def test_an_entry_whose_answer_left_redis_is_a_miss(manuals, tenant, pipeline_runs):
    from django.core.cache import cache

    on(tenant)
    client = client_for(tenant)
    ask(client, ASKED)
    cache.delete(SemanticCacheEntry.objects.get().key)
    assert ask(client, PARAPHRASE)["cached"] is False and len(pipeline_runs) == 2


@pytest.mark.django_db
def test_expired_rows_are_purged_by_the_beat_task(tenant, settings):
    vector = [1.0, 0.0, 0.0]
    now = timezone.now()
    for name, expires in (("old", now - timedelta(seconds=1)), ("live", now + timedelta(hours=1))):
        SemanticCacheEntry.objects.create(tenant=tenant, scope="s", signature="x", query=name, key=name,
                                          embedding=vector, expires_at=expires)  # fmt: skip
    assert purge_semantic_cache() == 1
    assert list(SemanticCacheEntry.objects.values_list("query", flat=True)) == ["live"]
    assert settings.CELERY_BEAT_SCHEDULE["purge-semantic-cache"]["task"] == purge_semantic_cache.name
