"""The console's graph pages on Neo4j show what they show on PostgreSQL: the sample KB ingested once
into each graph store, then its entity list, entity pages (neighbours and passages) and communities
read from the console's HTML, with nothing that depends on a store's own ids; and a curator's merge,
rename and delete acting on Neo4j's graph."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings

from engines import registry
from engines.base import GraphScope
from graph.community_build import rebuild_communities
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base
from knowledge.stores import graph_store
from knowledge.vocabulary import seed_vocabulary
from tests.factories import TenantFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SAMPLE = Path(settings.BASE_DIR) / "sample_kb"
PAGES = "/admin/knowledge/graphentity/"
# an entity page's lines: the href (ids) dropped, the rest kept
LINK = re.compile(r'<a href="[^"]*">([^<]*)</a>')
ENTITY_ROW = re.compile(
    r'<tr><td><a href="(?P<url>[^"]+)">(?P<label>[^<]*)</a></td><td><code>(?P<name>[^<]*)</code></td>'
    r"<td>(?P<kind>[^<]*)</td><td>(?P<count>\d+)</td></tr>"
)
ENTITIES_COMPARED = 12  # the most mentioned ones' pages


@pytest.fixture
def on_neo4j(settings, neo4j_url):
    """Switches the graph to the run's real Neo4j; this test's graph data there is dropped after."""

    def switch() -> None:
        settings.NEO4J_URL = neo4j_url
        registry.graph_store.cache_clear()
        assert type(graph_store()).__name__ == "Neo4jGraphStore"

    registry.graph_store.cache_clear()
    yield switch
    from knowledge.models import KnowledgeBaseVersion

    if settings.NEO4J_URL:
        for tenant_id, version_id in KnowledgeBaseVersion.objects.values_list("knowledge_base__tenant_id", "pk"):
            graph_store().drop_version(tenant_id, version_id)
    settings.NEO4J_URL = ""
    registry.graph_store.cache_clear()


def sample_kb():
    tenant = TenantFactory()
    seed_vocabulary(tenant, SAMPLE / ".vocabulary")
    kb = create_knowledge_base(tenant=tenant, name="console")
    Ingester(kb).ingest(discover_files([SAMPLE]))
    kb.refresh_from_db()
    rebuild_communities(kb.active_version)  # the task an ingestion queues
    return kb


def entity_list(client, version_id: int) -> list[dict[str, str]]:
    """Every entity row of the version's list, page after page."""
    rows, page = [], 1
    while True:
        html = client.get(PAGES, {"version": version_id, "p": page}).content.decode()
        rows += [match.groupdict() for match in ENTITY_ROW.finditer(html)]
        if 'class="next-page"' not in html:
            return rows
        page += 1


def same_neighbours(found: set[str], expected: set[str]) -> bool:
    """The same neighbours, relations and passages; the weights as shown (two decimals) may differ by the
    last digit: each store sums an entity pair's relations in its own order."""
    parse = re.compile(r"(.*) · weight ([\d.]+) · (.*)")
    ours = {parse.match(line).group(1, 3): float(parse.match(line).group(2)) for line in found}
    theirs = {parse.match(line).group(1, 3): float(parse.match(line).group(2)) for line in expected}
    return ours.keys() == theirs.keys() and all(abs(ours[key] - theirs[key]) <= 0.011 for key in ours)


def entity_page(client, url: str) -> tuple[set[str], list[str]]:
    """(neighbour lines, passage lines) of an entity's page, without ids. Neighbours tied at the cut-off
    weight of a full list are left out: which of them make the list depends on the store's ids."""
    html = client.get(url).content.decode()
    neighbours = re.search(r'<td class="neighbours">(.*?)</td>', html, re.S).group(1).split("<br>")
    passages = re.search(r'<td class="passages">(.*?)</td>', html, re.S).group(1).split("<br>")
    lines = [LINK.sub(r"\1", line) for line in neighbours if line != "-"]
    if len(lines) == 30:
        cut = re.search(r"weight ([\d.]+)", lines[-1]).group(1)
        lines = [line for line in lines if f"weight {cut} " not in line]
    return set(lines), [LINK.sub(r"\1", line) for line in passages]


def console_view(client, kb) -> dict:
    """What the console shows of the KB's graph, keyed by what both stores share (names, labels)."""
    entities = entity_list(client, kb.active_version_id)
    best = sorted(entities, key=lambda row: (-int(row["count"]), row["name"]))[:ENTITIES_COMPARED]
    communities = client.get("/admin/knowledge/graphcommunity/", {"version": kb.active_version_id}).content.decode()
    return {
        "entities": sorted((row["name"], row["label"], row["kind"], row["count"]) for row in entities),
        "pages": {row["name"]: entity_page(client, row["url"]) for row in best},
        # level and key entities: each store numbers communities of equal size in the order of its ids
        "communities": sorted(
            re.findall(r'/admin/knowledge/graphcommunity/[^"]*">(L\d+) #\d+: ([^<]*)</a>', communities)
        ),
    }


def test_the_console_shows_the_same_graph_on_neo4j_as_on_postgresql(admin_client, embedder, on_neo4j):
    postgres = console_view(admin_client, sample_kb())
    on_neo4j()
    kb = sample_kb()
    neo4j = console_view(admin_client, kb)
    assert len(postgres["entities"]) > 20 and neo4j["entities"] == postgres["entities"]
    assert any(neighbours for neighbours, _ in postgres["pages"].values())
    for name, (neighbours, passages) in postgres["pages"].items():
        assert same_neighbours(neo4j["pages"][name][0], neighbours), name
        assert neo4j["pages"][name][1] == passages, name
    assert len(postgres["communities"]) > 3 and neo4j["communities"] == postgres["communities"]
    # the entity search and a community's page read Neo4j too
    found = admin_client.get(PAGES, {"version": kb.active_version_id, "q": "ppr-9087"}).content.decode()
    labels = [row["label"] for row in map(re.Match.groupdict, ENTITY_ROW.finditer(found))]
    assert "PPR-9087" in labels and all("ppr-9087" in label.lower() for label in labels)
    (community,) = graph_store().communities(GraphScope(kb.tenant_id, (kb.active_version_id,)), 0)[:1]
    url = f"/admin/knowledge/graphcommunity/0-{community.number}/change/?version={kb.active_version_id}"
    page = admin_client.get(url).content.decode()
    assert community.key_entities[0] in page
    for chunk_id in community.chunk_ids:
        assert f"/admin/knowledge/chunk/{chunk_id}/change/" in page


def test_a_curator_merges_renames_and_deletes_on_neo4j(admin_client, embedder, on_neo4j, tmp_path):
    on_neo4j()
    (tmp_path / "lock.txt").write_text("The PPR-9087 door lock is made by Skyline Home.", encoding="utf-8")
    (tmp_path / "recall.txt").write_text("Skyline Homes recalled the AirSense monitor SKY-30452.", encoding="utf-8")
    kb = create_knowledge_base(tenant=TenantFactory(), name="curated", chunk_size=120, chunk_overlap=0)
    Ingester(kb).ingest(discover_files([tmp_path]))
    version = kb.active_version_id

    def names() -> dict[str, int]:
        _, nodes = graph_store().browse(GraphScope(kb.tenant_id, (version,)))
        return {node.name: node.chunk_count for node in nodes}

    def curate_url(name: str) -> str:
        (node,) = graph_store().find_entities(GraphScope(kb.tenant_id, (version,)), [name])
        return f"{PAGES}{node.entity_id}/curate/?version={version}"

    lock = admin_client.get(curate_url("ppr-9087")).content.decode()
    assert '<span class="entity-kind">code</span>' in lock and '<td class="relation">made_by</td>' in lock
    merged = admin_client.post(curate_url("skyline homes"), {"action": "merge", "into": "Skyline Home"})
    assert merged.status_code == 302 and "skyline homes" not in names() and names()["skyline home"] == 2
    admin_client.post(curate_url("skyline home"), {"action": "rename", "label": "Skyline Home Ltd"})
    assert names()["skyline home ltd"] == 2 and "skyline home" not in names()
    deleted = admin_client.post(curate_url("sky-30452"), {"action": "delete"})
    assert deleted.status_code == 302 and "sky-30452" not in names()
