"""Contract of the graph stores: what a KB version's graph holds after passages are added and
replaced, k-hop walks with their strongest paths, and scoping by tenant and KB version. Runs on the
PostgreSQL tables (real chunks, real FKs) and on the run's real Neo4j server (tests.servers)."""

from __future__ import annotations

import math

import pytest

from engines.base import Community, Entity, Extraction, GraphScope, GraphStore, GraphWalk, entity_score
from knowledge.models import KnowledgeBaseVersion
from knowledge.stores import graph_store
from tests.concurrency import race
from tests.factories import ChunkFactory, DocumentFactory, KnowledgeBaseFactory


@pytest.fixture(params=["postgres", "neo4j"])
def store(request, db) -> GraphStore:
    if request.param == "postgres":
        yield graph_store()
        return
    url = request.getfixturevalue("neo4j_url")  # the run's real server (tests.servers)
    from engines.neo4j_graph import Neo4jGraphStore
    from knowledge.models import KnowledgeBaseVersion

    neo4j = Neo4jGraphStore(url, timeout_s=10)
    yield neo4j
    # test databases reuse ids: forget what this test wrote
    for tenant_id, version_id in KnowledgeBaseVersion.objects.values_list("knowledge_base__tenant_id", "pk"):
        neo4j.drop_version(tenant_id, version_id)


def chain(*names: str, weight: float = 1.0) -> Extraction:
    """A passage mentioning ``names`` once each, each related to the next."""
    entities = tuple(Entity(name, name.upper(), "noun", 1) for name in names)
    return Extraction.by_name(entities, ((a, b, weight, "") for a, b in zip(names, names[1:])))


def with_relations(extraction: Extraction, *relations: tuple[str, str, float, str]) -> Extraction:
    """``extraction``'s entities with ``relations`` (names, weight, kind) instead of its own."""
    return Extraction.by_name(extraction.entities, relations)


@pytest.fixture
def kb():
    return KnowledgeBaseFactory()


def chunks_of(kb, count: int) -> list[int]:
    document = DocumentFactory(knowledge_base=kb)
    return [ChunkFactory(document=document).pk for _ in range(count)]


def scope_of(kb) -> GraphScope:
    return GraphScope(kb.tenant_id, (kb.active_version_id,))


def walk(
    hops: int = 2,
    *,
    fanout: int = 10,
    deep_fanout: int = 10,
    hub_passages: int = 100,
    frontier: int = 100,
    entities: int = 100,
    per_entity: int = 10,
) -> GraphWalk:
    return GraphWalk(hops, fanout, deep_fanout, hub_passages, frontier, 0.5, entities, per_entity)


def reached(store, kb, seeds: list[int], **options) -> dict:
    """entity id -> what ``reach`` says of it"""
    steps = store.reach(scope_of(kb), seeds, walk(**options), store.chunk_total(scope_of(kb)))
    return {entity.node.entity_id: entity for entity in steps}


def names_in(store, kb, *names: str) -> set[str]:
    """Which of ``names`` the KB's active version has as entities."""
    return {node.name for node in store.find_entities(scope_of(kb), list(names))}


def ids_by_name(store, kb, *names) -> dict[str, int]:
    return {node.name: node.entity_id for node in store.find_entities(scope_of(kb), list(names))}


def test_entities_are_one_per_name_with_their_passage_counts(store, kb):
    first, second = chunks_of(kb, 2)
    store.write(kb.tenant_id, kb.active_version_id, {first: chain("a", "b"), second: chain("b", "c")})
    nodes = {node.name: node for node in store.find_entities(scope_of(kb), ["a", "b", "c", "missing"])}
    assert {name: node.chunk_count for name, node in nodes.items()} == {"a": 1, "b": 2, "c": 1}
    assert nodes["b"].label == "B" and nodes["b"].version_id == kb.active_version_id
    assert store.entities(scope_of(kb), [nodes["c"].entity_id]) == [nodes["c"]]
    assert reached(store, kb, [nodes["c"].entity_id], hops=0)[nodes["c"].entity_id].node == nodes["c"]


def test_reached_entities_map_back_to_the_passages_mentioning_them_most(store, kb):
    first, second = chunks_of(kb, 2)
    extraction = Extraction((Entity("a", "a", "noun", 3),))
    store.write(kb.tenant_id, kb.active_version_id, {first: extraction, second: chain("a")})
    a = ids_by_name(store, kb, "a")["a"]
    assert store.mentions(scope_of(kb), [a], per_entity=5) == [(a, first, 3), (a, second, 1)]
    assert store.mentions(scope_of(kb), [a], per_entity=1) == [(a, first, 3)]
    assert reached(store, kb, [a])[a].passages == ((first, 3), (second, 1))
    assert reached(store, kb, [a], per_entity=1)[a].passages == ((first, 3),)


def mentioning(*names: str, counts: dict[str, int] | None = None) -> Extraction:
    """A passage mentioning ``names`` (once each unless ``counts`` says otherwise), no relations."""
    return Extraction(tuple(Entity(name, name.upper(), "code", (counts or {}).get(name, 1)) for name in names))


def test_a_bridge_leads_from_a_passage_through_an_entity_it_shares_to_the_other_passages(store, kb):
    menu, monitor, offer, spare, noise = chunks_of(kb, 5)
    store.write(kb.tenant_id, kb.active_version_id, {
        menu: mentioning("dish", "sky-1", "only-here"),  # "dish" and "only-here": in no other passage
        monitor: mentioning("sky-1", "airsense"),
        offer: mentioning("airsense", "common"),
        spare: mentioning("sky-1", "common", counts={"sky-1": 2}),
        noise: mentioning("common"),
    })  # fmt: skip
    ids = ids_by_name(store, kb, "sky-1", "airsense")
    steps = store.bridges(scope_of(kb), [menu], hub_passages=3, per_entity=10)
    assert [(s.via, s.entity_id, s.label, s.chunk_count, s.chunk_id) for s in steps] == [
        (menu, ids["sky-1"], "SKY-1", 3, monitor), (menu, ids["sky-1"], "SKY-1", 3, spare)
    ]  # fmt: skip
    from_monitor = store.bridges(scope_of(kb), [monitor], hub_passages=3, per_entity=10)
    assert [(s.entity_id, s.chunk_id) for s in from_monitor] == sorted(
        [(ids["sky-1"], menu), (ids["sky-1"], spare), (ids["airsense"], offer)]
    )
    # "sky-1" is in 3 passages: over a hub bound of 2 it leads nowhere; "common" (3 passages) neither
    assert [(s.label, s.chunk_id) for s in store.bridges(scope_of(kb), [monitor], 2, 10)] == [("AIRSENSE", offer)]
    # per entity, the passages mentioning it most: spare names sky-1 twice
    assert [s.chunk_id for s in store.bridges(scope_of(kb), [menu], 3, per_entity=1)] == [spare]
    assert store.bridges(scope_of(kb), [], 3, 10) == []


def test_bridges_stay_in_their_tenant_and_version(store, kb):
    other = KnowledgeBaseFactory()
    (mine,), (theirs, their_other) = chunks_of(kb, 1), chunks_of(other, 2)
    store.write(kb.tenant_id, kb.active_version_id, {mine: mentioning("sky-1")})
    store.write(
        other.tenant_id, other.active_version_id, {theirs: mentioning("sky-1"), their_other: mentioning("sky-1")}
    )
    assert store.bridges(scope_of(kb), [mine], 10, 10) == []  # sky-1 is in one passage of this version
    assert store.bridges(scope_of(kb), [theirs], 10, 10) == []
    assert [s.chunk_id for s in store.bridges(scope_of(other), [theirs], 10, 10)] == [their_other]


def test_reach_walks_up_to_hops_with_the_strongest_path(store, kb):
    (chunk,) = chunks_of(kb, 1)
    # a - b - c - d, and a weaker shortcut a - c
    extraction = chain("a", "b", "c", "d", weight=3.0)
    extraction = with_relations(extraction, *extraction.named_relations(), ("a", "c", 0.5, ""))
    store.write(kb.tenant_id, kb.active_version_id, {chunk: extraction})
    ids = ids_by_name(store, kb, "a", "b", "c", "d")
    steps = reached(store, kb, [ids["a"]])
    assert set(steps) == {ids["a"], ids["b"], ids["c"], ids["d"]}
    assert steps[ids["a"]].hops == 0 and steps[ids["a"]].strength == 1.0 and steps[ids["a"]].labels == ("A",)
    # via b: 0.75 * 0.75 beats the direct 0.5 / 1.5
    assert steps[ids["c"]].path == (ids["a"], ids["b"], ids["c"]) and steps[ids["c"]].labels == ("A", "B", "C")
    assert math.isclose(steps[ids["c"]].strength, 0.75 * 0.75)
    assert steps[ids["d"]].path == (ids["a"], ids["c"], ids["d"]) and steps[ids["d"]].hops == 2
    assert set(reached(store, kb, [ids["a"]], hops=1)) == {ids["a"], ids["b"], ids["c"]}
    assert set(reached(store, kb, [ids["a"]], hops=1, fanout=1)) == {ids["a"], ids["b"]}
    # beyond the first hop, deep_fanout: c's strongest relations tie (b and d, 3.0), the lower id wins
    # (Neo4j's ids are hashes, so which of b and d that is varies between runs)
    winner = min(ids["b"], ids["d"])
    assert set(reached(store, kb, [ids["a"]], deep_fanout=1)) == {ids["a"], ids["b"], ids["c"], winner}


def test_reached_entities_are_scored_and_the_best_kept(store, kb):
    first, second, third = chunks_of(kb, 3)
    graphs = {first: chain("a", "b", weight=3.0), second: chain("b", "c", weight=1.0), third: chain("c")}
    store.write(kb.tenant_id, kb.active_version_id, graphs)
    ids = ids_by_name(store, kb, "a", "b", "c")
    assert store.chunk_total(scope_of(kb)) == 3
    steps = store.reach(scope_of(kb), [ids["a"]], walk(), 3)
    expected = {  # 3 passages in scope; b is in 2 of them, c in 2
        ids["a"]: entity_score(1.0, 0, 1, 3, 0.5),
        ids["b"]: entity_score(0.75, 1, 2, 3, 0.5),
        ids["c"]: entity_score(0.75 * 0.5, 2, 2, 3, 0.5),
    }
    assert [step.node.entity_id for step in steps] == sorted(expected, key=lambda i: -expected[i])
    assert all(math.isclose(step.score, expected[step.node.entity_id]) for step in steps)
    assert [step.node.entity_id for step in store.reach(scope_of(kb), [ids["a"]], walk(entities=2), 3)] == [
        step.node.entity_id for step in steps[:2]
    ]


def test_a_walk_does_not_go_on_from_a_hub(store, kb):
    chunk_ids = chunks_of(kb, 3)
    graphs = {chunk_ids[0]: chain("a", "hub", "b"), chunk_ids[1]: chain("hub"), chunk_ids[2]: chain("hub")}
    store.write(kb.tenant_id, kb.active_version_id, graphs)
    ids = ids_by_name(store, kb, "a", "hub", "b")
    assert set(reached(store, kb, [ids["a"]], hub_passages=3)) == {ids["a"], ids["hub"], ids["b"]}
    assert set(reached(store, kb, [ids["a"]], hub_passages=2)) == {ids["a"], ids["hub"]}  # reached, not walked
    assert reached(store, kb, [ids["hub"]], hub_passages=2).keys() == {ids["hub"]}


def test_each_step_names_its_relation_kind(store, kb):
    first, second = chunks_of(kb, 2)
    typed = with_relations(chain("lock", "maker"), ("lock", "maker", 1.0, "made_by"))
    graphs = {first: typed, second: chain("maker", "city")}
    store.write(kb.tenant_id, kb.active_version_id, graphs)
    ids = ids_by_name(store, kb, "lock", "maker", "city")
    city = reached(store, kb, [ids["lock"]])[ids["city"]]
    assert city.labels == ("LOCK", "MAKER", "CITY") and city.relations == ("made_by", "")
    # a pair related both ways (typed in one passage, by co-occurrence in another) names the typed kind
    (third,) = chunks_of(kb, 1)
    store.write(kb.tenant_id, kb.active_version_id, {third: chain("lock", "maker", weight=5.0)})
    assert reached(store, kb, [ids["lock"]])[ids["maker"]].relations == ("made_by",)


def test_a_typed_relation_keeps_its_direction_and_a_walk_says_which_way_it_went(store, kb):
    (chunk,) = chunks_of(kb, 1)
    # the direction is the statement's, head -> tail, whichever end has the lower id
    typed = with_relations(
        chain("lock", "maker", "city"), ("lock", "maker", 1.0, "made_by"), ("maker", "city", 1.0, "")
    )
    store.write(kb.tenant_id, kb.active_version_id, {chunk: typed})
    ids = ids_by_name(store, kb, "lock", "maker", "city")
    forward = reached(store, kb, [ids["lock"]])[ids["maker"]]
    assert forward.relations == ("made_by",) and forward.reversed == (False,)
    backward = reached(store, kb, [ids["maker"]])[ids["lock"]]
    assert backward.relations == ("made_by",) and backward.reversed == (True,)
    from_city = reached(store, kb, [ids["city"]])[ids["lock"]]
    assert from_city.relations == ("", "made_by") and from_city.reversed == (False, True)  # co-occurrence: never
    # the same statement with the ends swapped is another relation; removing the passage forgets both ways
    (other,) = chunks_of(kb, 1)
    swapped = with_relations(chain("maker", "lock"), ("maker", "lock", 3.0, "made_by"))
    store.write(kb.tenant_id, kb.active_version_id, {other: swapped})
    assert reached(store, kb, [ids["lock"]])[ids["maker"]].reversed == (True,)  # the heavier one now
    store.delete(kb.tenant_id, kb.active_version_id, [other])
    assert reached(store, kb, [ids["lock"]])[ids["maker"]].reversed == (False,)
    assert store.edges(kb.tenant_id, kb.active_version_id) == sorted(
        [(*sorted((ids["lock"], ids["maker"])), 1.0), (*sorted((ids["maker"], ids["city"])), 1.0)]
    )


def test_relation_weights_add_up_over_passages(store, kb):
    first, second = chunks_of(kb, 2)
    graphs = {first: chain("a", "b", weight=1.0), second: chain("a", "b", weight=1.0)}
    store.write(kb.tenant_id, kb.active_version_id, graphs)
    ids = ids_by_name(store, kb, "a", "b")
    assert math.isclose(reached(store, kb, [ids["a"]], hops=1)[ids["b"]].strength, 2 / 3)


def test_replacing_passages_replaces_their_part_of_the_graph(store, kb):
    first, second = chunks_of(kb, 2)
    store.write(kb.tenant_id, kb.active_version_id, {first: chain("a", "b"), second: chain("b", "c")})
    (third,) = chunks_of(kb, 1)
    store.write(kb.tenant_id, kb.active_version_id, {third: chain("b", "d")}, replacing=[first])
    nodes = {node.name: node for node in store.find_entities(scope_of(kb), ["a", "b", "c", "d"])}
    assert set(nodes) == {"b", "c", "d"}  # nothing mentions a any more
    assert nodes["b"].chunk_count == 2
    assert set(reached(store, kb, [nodes["b"].entity_id], hops=1)) == {nodes[name].entity_id for name in "bcd"}


def named_edges(store, kb) -> dict[tuple[str, str], float]:
    """The version's edges by entity names (ids differ between versions)."""
    edges = store.edges(kb.tenant_id, kb.active_version_id)
    ids = sorted({entity for a, b, _ in edges for entity in (a, b)})
    names = {node.entity_id: node.name for node in store.entities(scope_of(kb), ids)}
    return {tuple(sorted((names[a], names[b]))): weight for a, b, weight in edges}


def test_removing_passages_subtracts_exactly_their_relations(store, kb):
    typed = with_relations(chain("a", "b"), ("a", "b", 2.0, "made_by"))
    passages = {"p1": chain("a", "b", "c", weight=1.0), "p2": typed, "p3": chain("b", "c", "d", weight=0.5),
                "p4": chain("a", "b", weight=0.25)}  # fmt: skip
    chunk_of = dict(zip(passages, chunks_of(kb, 4), strict=True))
    store.write(kb.tenant_id, kb.active_version_id, {chunk_of[p]: passages[p] for p in passages})

    def expected(*kept: str) -> dict[tuple[str, str], float]:
        """What a fresh version holding only ``kept`` has."""
        fresh = KnowledgeBaseFactory()
        fresh_chunks = chunks_of(fresh, len(kept))
        store.write(fresh.tenant_id, fresh.active_version_id, {chunk: passages[p] for chunk, p in zip(fresh_chunks, kept, strict=True)})  # fmt: skip
        return named_edges(store, fresh)

    assert named_edges(store, kb) == pytest.approx(expected("p1", "p2", "p3", "p4"))
    # a typed relation and a co-occurrence of the same pair go separately
    store.delete(kb.tenant_id, kb.active_version_id, [chunk_of["p2"], chunk_of["p3"]])
    assert named_edges(store, kb) == pytest.approx(expected("p1", "p4"))
    assert {node.name for node in store.find_entities(scope_of(kb), list("abcd"))} == {"a", "b", "c"}
    ids = ids_by_name(store, kb, "a", "b")
    assert reached(store, kb, [ids["a"]], hops=1)[ids["b"]].relations == ("",)
    # re-extracting passages in place (a graph rebuild) changes nothing; re-ingesting one adds it back
    store.write(kb.tenant_id, kb.active_version_id, {chunk_of["p1"]: passages["p1"], chunk_of["p4"]: passages["p4"]}, replacing=[chunk_of["p1"], chunk_of["p4"]])  # fmt: skip
    assert named_edges(store, kb) == pytest.approx(expected("p1", "p4"))
    store.write(kb.tenant_id, kb.active_version_id, {chunk_of["p3"]: passages["p3"]})
    assert named_edges(store, kb) == pytest.approx(expected("p1", "p3", "p4"))
    store.delete(kb.tenant_id, kb.active_version_id, [chunk_of[p] for p in ("p1", "p3", "p4")])
    assert store.edges(kb.tenant_id, kb.active_version_id) == []
    assert store.find_entities(scope_of(kb), list("abcd")) == []


def test_a_hop_goes_on_only_from_the_best_scored_entities_of_the_hop_before(store, kb):
    (chunk,) = chunks_of(kb, 1)
    # a - b (strong) - d and a - c (weak) - e: b's path is stronger, so with a frontier of 1 only b walks on
    relations = (("a", "b", 3.0, ""), ("a", "c", 1.0, ""), ("b", "d", 1.0, ""), ("c", "e", 1.0, ""))
    graph = with_relations(chain(*"abcde"), *relations)
    store.write(kb.tenant_id, kb.active_version_id, {chunk: graph})
    ids = ids_by_name(store, kb, *"abcde")
    assert set(reached(store, kb, [ids["a"]], frontier=2)) == {ids[name] for name in "abcde"}
    assert set(reached(store, kb, [ids["a"]], frontier=1)) == {ids[name] for name in "abcd"}
    # the frontier bounds the seeds too: the lower id of two equally scored ones (Neo4j's ids are hashes,
    # so which of d and e that is varies between runs)
    walker, neighbour = min((ids["d"], ids["b"]), (ids["e"], ids["c"]))
    assert set(reached(store, kb, [ids["d"], ids["e"]], hops=1, frontier=1)) == {neighbour, ids["d"], ids["e"]}


def test_every_read_is_scoped_to_the_tenant_and_version(store, kb):
    other = KnowledgeBaseFactory()
    (mine,), (theirs,) = chunks_of(kb, 1), chunks_of(other, 1)
    store.write(kb.tenant_id, kb.active_version_id, {mine: chain("a", "b")})
    store.write(other.tenant_id, other.active_version_id, {theirs: chain("a", "c")})
    ids = ids_by_name(store, kb, "a", "b", "c")
    assert set(ids) == {"a", "b"}
    their_ids = ids_by_name(store, other, "a", "c")
    wrong_tenant = GraphScope(other.tenant_id, (kb.active_version_id,))
    assert store.find_entities(wrong_tenant, ["a"]) == []
    assert reached(store, kb, [their_ids["a"]]) == {}
    assert store.mentions(scope_of(kb), [their_ids["a"]], per_entity=10) == []
    steps = reached(store, kb, [ids["a"]])
    assert set(steps) == {ids["a"], ids["b"]}
    assert {chunk for step in steps.values() for chunk, _ in step.passages} == {mine}


def test_dropping_versions_forgets_their_graph(store, kb):
    other = KnowledgeBaseFactory()
    (mine,), (theirs,) = chunks_of(kb, 1), chunks_of(other, 1)
    store.write(kb.tenant_id, kb.active_version_id, {mine: chain("a", "b")})
    store.write(other.tenant_id, other.active_version_id, {theirs: chain("a", "b")})
    a = ids_by_name(store, kb, "a")["a"]
    store.drop_version(kb.tenant_id, kb.active_version_id)
    assert store.find_entities(scope_of(kb), ["a", "b"]) == []
    assert reached(store, kb, [a]) == {} and store.mentions(scope_of(kb), [a], per_entity=5) == []
    assert len(store.find_entities(scope_of(other), ["a", "b"])) == 2


def test_building_a_version_rewrites_each_batch_of_passages(store, kb):
    first, second = chunks_of(kb, 2)
    store.write(kb.tenant_id, kb.active_version_id, {first: chain("old", "b"), second: chain("b", "c")})
    batches = iter([{first: chain("new", "b")}, {second: chain("c", "d")}])
    assert store.build_version(kb.tenant_id, kb.active_version_id, batches) == 2
    assert names_in(store, kb, "old", "new", "b", "c", "d") == {"new", "b", "c", "d"}
    ids = ids_by_name(store, kb, "b", "c")
    assert {chunk for _, chunk, _ in store.mentions(scope_of(kb), [ids["b"]], per_entity=5)} == {first}
    assert {chunk for _, chunk, _ in store.mentions(scope_of(kb), [ids["c"]], per_entity=5)} == {second}


def test_a_deleted_passage_takes_only_what_no_other_mentions(store, kb):
    first, second = chunks_of(kb, 2)
    store.write(kb.tenant_id, kb.active_version_id, {first: chain("a", "b"), second: chain("b", "c")})
    store.delete(kb.tenant_id, kb.active_version_id, [first])
    store.delete(kb.tenant_id, kb.active_version_id, [])  # nothing named: nothing changes
    assert names_in(store, kb, "a", "b", "c") == {"b", "c"}
    b = ids_by_name(store, kb, "b")["b"]
    assert {chunk for _, chunk, _ in store.mentions(scope_of(kb), [b], per_entity=5)} == {second}


def test_a_switch_leaves_both_versions_readable(store, kb):
    following = KnowledgeBaseVersion.objects.create(
        knowledge_base=kb,
        number=2,
        embedding_model=kb.embedding_model,
        embedding_dim=kb.embedding_dim,
        chunk_size=kb.chunk_size,
        chunk_overlap=0,
    )
    (old,), new = chunks_of(kb, 1), ChunkFactory(document=DocumentFactory(knowledge_base=kb), kb_version=following).pk
    store.write(kb.tenant_id, kb.active_version_id, {old: chain("old", "shared")})
    store.write(kb.tenant_id, following.pk, {new: chain("new", "shared")})
    store.switch_version(kb.tenant_id, kb.active_version_id, following.pk)
    assert names_in(store, kb, "old", "new", "shared") == {"old", "shared"}
    assert {node.name for node in store.find_entities(GraphScope(kb.tenant_id, (following.pk,)), ["old", "new"])} == {
        "new"
    }


# --- communities ----------------------------------------------------------------------------------


def test_edges_are_the_undirected_graph_with_weights_summed_over_passages(store, kb):
    first, second = chunks_of(kb, 2)
    graphs = {first: chain("a", "b", "c", weight=1.0), second: chain("a", "b", weight=0.5)}
    store.write(kb.tenant_id, kb.active_version_id, graphs)
    ids = ids_by_name(store, kb, "a", "b", "c")
    expected = sorted([(*sorted((ids["a"], ids["b"])), 1.5), (*sorted((ids["b"], ids["c"])), 1.0)])
    assert store.edges(kb.tenant_id, kb.active_version_id) == expected
    other = KnowledgeBaseFactory()
    assert store.edges(other.tenant_id, other.active_version_id) == []


def community(kb, level: int, number: int, *, parent=None, summary="s", chunk_ids=(), entity_ids=(1, 2)) -> Community:
    return Community(
        kb.active_version_id, level, number, parent, tuple(entity_ids), ("A", "B"), summary, summary.lower(),
        tuple(chunk_ids), (0.5, -0.25),
    )  # fmt: skip


def test_communities_are_replaced_whole_and_read_by_level(store, kb):
    chunk_ids = tuple(chunks_of(kb, 2))
    first = [community(kb, 0, 0, summary="Old")]
    store.replace_communities(kb.tenant_id, kb.active_version_id, first)
    assert store.communities(scope_of(kb)) == first
    second = [
        community(kb, 0, 0, summary="Locks", chunk_ids=chunk_ids, entity_ids=(7, 3, 5)),
        community(kb, 0, 1, summary="Dishes"),
        community(kb, 1, 0, parent=0, summary="Batteries"),
    ]
    store.replace_communities(kb.tenant_id, kb.active_version_id, second)
    assert store.communities(scope_of(kb)) == second  # the old one is gone; order: level, number
    assert store.communities(scope_of(kb), level=1) == second[2:]
    assert store.communities(scope_of(kb), level=2) == []
    store.replace_communities(kb.tenant_id, kb.active_version_id, [])
    assert store.communities(scope_of(kb)) == []


def test_communities_are_scoped_to_the_tenant_and_version_and_dropped_with_it(store, kb):
    other = KnowledgeBaseFactory()
    store.replace_communities(kb.tenant_id, kb.active_version_id, [community(kb, 0, 0, summary="Mine")])
    store.replace_communities(other.tenant_id, other.active_version_id, [community(other, 0, 0, summary="Theirs")])
    assert [c.summary for c in store.communities(scope_of(kb))] == ["Mine"]
    assert store.communities(GraphScope(other.tenant_id, (kb.active_version_id,))) == []
    store.drop_version(kb.tenant_id, kb.active_version_id)
    assert store.communities(scope_of(kb)) == []
    assert [c.summary for c in store.communities(scope_of(other))] == ["Theirs"]


def test_ping_names_the_backend(store):
    assert store.name in store.ping()


def test_a_misspelt_name_finds_the_most_similar_entity_in_scope(store, kb):
    (chunk,) = chunks_of(kb, 1)
    store.write(kb.tenant_id, kb.active_version_id, {chunk: chain("portalock pro", "skyline home")})
    ids = ids_by_name(store, kb, "portalock pro", "skyline home")
    found = store.find_similar(scope_of(kb), ["portalok pro", "skyline hom", "tomato seedlings"], 0.6)
    assert {node.entity_id for node in found} == {ids["portalock pro"], ids["skyline home"]}
    assert store.find_similar(scope_of(kb), ["portalok pro"], 0.95) == []  # not that similar
    assert store.find_similar(scope_of(kb), [], 0.6) == []
    other = KnowledgeBaseFactory()
    assert store.find_similar(scope_of(other), ["portalok pro"], 0.6) == []
    assert store.find_similar(GraphScope(other.tenant_id, (kb.active_version_id,)), ["portalok pro"], 0.6) == []


# --- concurrent writers of one version's graph (tests.concurrency.race: threads on the real database) -


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_of_one_versions_entities_share_one_row_per_name(kb):
    store, (first, second) = graph_store(), chunks_of(kb, 2)
    outcomes = race(
        lambda: store.write(kb.tenant_id, kb.active_version_id, {first: chain("lock", "door")}),
        lambda: store.write(kb.tenant_id, kb.active_version_id, {second: chain("door", "lock")}),
    )
    assert outcomes == [None, None]
    nodes = store.find_entities(scope_of(kb), ["lock", "door"])
    assert sorted((node.name, node.chunk_count) for node in nodes) == [("door", 2), ("lock", 2)]


@pytest.mark.django_db(transaction=True)
def test_concurrent_replacements_of_one_versions_communities_leave_one_whole_set(kb):
    store = graph_store()
    sets = [[community(kb, 0, 0, summary=name), community(kb, 0, 1, summary=name)] for name in ("One", "Other")]
    version = kb.active_version_id
    outcomes = race(*[lambda rows=rows: store.replace_communities(kb.tenant_id, version, rows) for rows in sets])
    assert outcomes == [None, None]
    assert store.communities(scope_of(kb)) in sets
