"""Contract of the graph stores' console reads (``browse``, ``neighbours``), on the PostgreSQL tables and
on the run's real Neo4j server, with the fixtures of ``test_graph_store``."""

from __future__ import annotations

from engines.base import Entity, Extraction, GraphScope
from tests.engines.test_graph_store import chain, chunks_of, ids_by_name, kb, scope_of, store, with_relations
from tests.factories import KnowledgeBaseFactory

__all__ = ["kb", "store"]  # fixtures


def test_browsing_finds_entities_by_part_of_their_name_or_label_the_most_mentioned_first(store, kb):
    first, second, third = chunks_of(kb, 3)
    lock = Extraction((Entity("ppr-9087", "PPR-9087", "code", 1), Entity("skyline home", "Skyline Home", "name", 1)))
    graphs = {first: lock, second: chain("skyline home", "door"), third: chain("skyline home", "door", "bolt")}
    store.write(kb.tenant_id, kb.active_version_id, graphs)
    total, nodes = store.browse(scope_of(kb))
    assert total == 4 and [node.name for node in nodes][:2] == ["skyline home", "door"]
    assert [node.chunk_count for node in nodes] == [3, 2, 1, 1]
    assert store.browse(scope_of(kb), contains="PPR")[1][0].label == "PPR-9087"  # case does not matter
    assert [node.name for node in store.browse(scope_of(kb), contains="home")[1]] == ["skyline home"]
    assert store.browse(scope_of(kb), kind="code") == (1, store.browse(scope_of(kb), contains="9087")[1])
    assert store.browse(scope_of(kb), contains="nothing like it") == (0, [])


def test_browsing_pages_through_the_entities_in_a_stable_order(store, kb):
    chunk_ids = chunks_of(kb, 5)
    graphs = {chunk: chain(f"e{n}") for n, chunk in enumerate(chunk_ids)}
    store.write(kb.tenant_id, kb.active_version_id, graphs)
    whole = store.browse(scope_of(kb))[1]
    pages = [store.browse(scope_of(kb), offset=offset, limit=2) for offset in (0, 2, 4, 6)]
    assert [total for total, _ in pages] == [5, 5, 5, 5]
    assert [node for _, page in pages for node in page] == whole and pages[-1][1] == []


def test_browsing_stays_in_its_tenant_and_version(store, kb):
    other = KnowledgeBaseFactory()
    (mine,), (theirs,) = chunks_of(kb, 1), chunks_of(other, 1)
    store.write(kb.tenant_id, kb.active_version_id, {mine: chain("mine")})
    store.write(other.tenant_id, other.active_version_id, {theirs: chain("theirs")})
    assert [node.name for node in store.browse(scope_of(kb))[1]] == ["mine"]
    assert store.browse(GraphScope(kb.tenant_id, (other.active_version_id,))) == (0, [])
    assert store.browse(GraphScope(other.tenant_id, (kb.active_version_id,))) == (0, [])


def test_an_entitys_neighbours_sum_its_relations_and_read_typed_ones_from_its_side(store, kb):
    first, second, third = chunks_of(kb, 3)
    typed = with_relations(chain("lock", "maker"), ("lock", "maker", 1.0, "made_by"))
    graphs = {first: typed, second: chain("lock", "maker", weight=2.0), third: chain("lock", "bolt", weight=0.5)}
    store.write(kb.tenant_id, kb.active_version_id, graphs)
    ids = ids_by_name(store, kb, "lock", "maker", "bolt")
    maker, bolt = store.neighbours(scope_of(kb), ids["lock"], 10)
    assert (maker.entity_id, maker.label, maker.kind) == (ids["maker"], "MAKER", "noun")
    assert (maker.weight, maker.passages, maker.relations) == (3.0, 2, (("made_by", False),))
    assert (bolt.entity_id, bolt.weight, bolt.passages, bolt.relations) == (ids["bolt"], 0.5, 1, ())
    (lock,) = store.neighbours(scope_of(kb), ids["maker"], 10)
    assert lock.entity_id == ids["lock"] and lock.relations == (("made_by", True),)  # read from the tail
    assert store.neighbours(scope_of(kb), ids["lock"], 1) == [maker]


def test_neighbours_stay_in_their_tenant_and_version(store, kb):
    (chunk,) = chunks_of(kb, 1)
    store.write(kb.tenant_id, kb.active_version_id, {chunk: chain("lock", "maker")})
    lock = ids_by_name(store, kb, "lock")["lock"]
    other = KnowledgeBaseFactory()
    assert store.neighbours(GraphScope(other.tenant_id, (kb.active_version_id,)), lock, 10) == []
    assert store.neighbours(GraphScope(kb.tenant_id, (other.active_version_id,)), lock, 10) == []


def test_no_neighbour_is_given_when_none_is_asked_for(store, kb):
    (chunk,) = chunks_of(kb, 1)
    store.write(kb.tenant_id, kb.active_version_id, {chunk: chain("lock", "maker")})
    assert store.neighbours(scope_of(kb), ids_by_name(store, kb, "lock")["lock"], 0) == []
