"""Three-way hybrid's bridge slots (retrieval.services.bridges): which passages the graph places inside
the top 10, where, and that two-way and graph-off answers do not change."""

from __future__ import annotations

import pytest

from graph.ranking import GraphBridge
from retrieval.fusion_functions import Contribution, FusedCandidate
from retrieval.services.bridges import BridgeSlots, place_bridges
from tests.retrieval.services.conftest import names, run, small_kb


def ranking(count: int) -> list[FusedCandidate]:
    """Chunks 1..count, fused in that order (scores 100, 99, ...), hashed h1..hcount."""
    return [
        FusedCandidate(chunk_id, f"h{chunk_id}", 101.0 - chunk_id, {"bm25": Contribution(chunk_id, 1.0, "q")})
        for chunk_id in range(1, count + 1)
    ]


HASHES = {chunk_id: f"h{chunk_id}" for chunk_id in range(1, 13)} | {20: "h20", 21: "h3", 30: "h30"}
SLOTS = BridgeSlots(slots=2, rank=8, head=5)


def test_the_best_bridges_from_the_head_take_the_ranks_from_the_bridge_rank_on():
    bridges = [
        GraphBridge(via=2, chunk_id=20, weight=3.0, entity="SKY-1"),  # 3.0 / 2 = 1.5, a passage no leg found
        GraphBridge(via=2, chunk_id=11, weight=1.0, entity="SKY-1"),  # 0.5 ...
        GraphBridge(via=1, chunk_id=11, weight=1.2, entity="AirSense"),  # ... + 1.2 / 1: 11 is the best bridge
        GraphBridge(via=9, chunk_id=30, weight=100.0, entity="X"),  # leaves rank 9, outside the head of 5
        GraphBridge(via=1, chunk_id=3, weight=100.0, entity="Y"),  # ranked above rank 8 already
        GraphBridge(via=1, chunk_id=21, weight=100.0, entity="Z"),  # the same text as chunk 3
    ]
    placed = place_bridges(ranking(12), bridges, HASHES, SLOTS, "q")
    assert [candidate.chunk_id for candidate in placed] == [1, 2, 3, 4, 5, 6, 7, 11, 20, 8, 9, 10, 12]
    scores = [candidate.fused_score for candidate in placed]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == len(scores)  # an order by score keeps it
    new = placed[8]
    assert new.retrievers == {"graph": Contribution(rank=0, score=pytest.approx(1.5), query="q")}
    assert placed[7].retrievers["bm25"].rank == 11 and placed[7].retrievers["graph"].score == pytest.approx(1.7)


def test_one_slot_a_later_rank_or_no_slot():
    bridges = [GraphBridge(2, 20, 3.0, "SKY-1"), GraphBridge(1, 11, 1.0, "A")]
    one = place_bridges(ranking(12), bridges, HASHES, BridgeSlots(slots=1, rank=10, head=5))
    assert [candidate.chunk_id for candidate in one] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 20, 10, 11, 12]
    assert place_bridges(ranking(12), bridges, HASHES, BridgeSlots(slots=0, rank=8, head=5)) == ranking(12)
    assert place_bridges(ranking(12), [], HASHES, SLOTS) == ranking(12)
    short = place_bridges(ranking(3), bridges, HASHES, SLOTS)  # fewer candidates than the bridge rank: at the end
    assert [candidate.chunk_id for candidate in short] == [1, 2, 3, 20, 11]


# A multi-hop question over hand-written passages: the answer (offer.txt) shares no word with it; the
# menu names the dish and the monitor's code, the monitor's page and the offer name the code.
FILES = {
    "menu.txt": "The Shuxiang kitchen serves 鱼香肉丝 every day and keeps a SKY-30452 on the wall.",
    "monitor.txt": "The SKY-30452 measures PM2.5 and cooking fumes.",
    "offer.txt": "Alliance members renew the SKY-30452 warranty each January for 90 yuan.",
    **{
        f"noise{number:02d}.txt": f"Kitchen note {number}: partners who serve dishes ask about discounts and price cuts."
        for number in range(1, 15)
    },
}
QUERY = "What price cut do partners get on the air monitor in the kitchen that serves 鱼香肉丝?"


@pytest.fixture
def kb(tmp_path, embedder):
    return small_kb(tmp_path, FILES, "bridges", terms=("鱼香肉丝",))


@pytest.mark.slow
@pytest.mark.django_db
def test_three_way_hybrid_places_the_passages_one_passage_on_at_the_bridge_ranks(kb, settings):
    settings.GRAPH_BRIDGE_SLOTS, settings.GRAPH_BRIDGE_RANK, settings.GRAPH_BRIDGE_HEAD = 2, 8, 5
    two_way = names(run(kb, QUERY, mode="hybrid", top_k=20))
    assert two_way[0] == "menu.txt" and min(two_way.index("monitor.txt"), two_way.index("offer.txt")) >= 8
    three_way = run(kb, QUERY, mode="hybrid", graph=True, top_k=20)
    # from the menu (rank 1) through SKY-30452: equal scores, the passage ingested first first
    assert names(three_way)[:7] == two_way[:7] and names(three_way)[7:9] == ["monitor.txt", "offer.txt"]
    menu = three_way.results[0].chunk_id
    assert three_way.results[8].retrievers["graph"]["bridge"] == {"via": menu, "entity": "SKY-30452"}
    settings.GRAPH_BRIDGE_SLOTS = 0  # no slot: neither is in the top 8
    assert {"monitor.txt", "offer.txt"}.isdisjoint(names(run(kb, QUERY, mode="hybrid", graph=True, top_k=20))[:8])


@pytest.mark.slow
@pytest.mark.django_db
def test_two_way_and_graph_mode_answers_do_not_depend_on_the_bridge_slots(kb, settings):
    answers = {}
    for slots in (0, 2):
        settings.GRAPH_BRIDGE_SLOTS = slots
        answers[slots] = [
            [(hit.chunk_id, hit.score) for hit in run(kb, QUERY, mode=mode, top_k=20, **options).results]
            for mode, options in (("hybrid", {}), ("hybrid", {"weights": {"vector": 1, "bm25": 1, "graph": 0}}),
                                  ("graph", {}), ("bm25", {}))
        ]  # fmt: skip
    assert answers[0] == answers[2] and all(answers[0])


@pytest.mark.slow
@pytest.mark.django_db
def test_a_bridged_child_counts_as_its_parent_passage(tmp_path, embedder, settings):
    """In a parent_child KB the bridges leave and reach child chunks and are placed as their parent
    passages: every hit a parent, each once (test_parents checks the keys of a child only a bridge reached)."""
    settings.GRAPH_BRIDGE_SLOTS, settings.GRAPH_BRIDGE_RANK, settings.GRAPH_BRIDGE_HEAD = 2, 8, 5
    kb = small_kb(
        tmp_path, FILES, "bridges-parents", ("鱼香肉丝",), chunking="parent_child", chunk_size=12, parent_chunk_size=120
    )
    three_way = run(kb, QUERY, mode="hybrid", graph=True, top_k=20)
    bridged = [hit for hit in three_way.results if "bridge" in hit.retrievers.get("graph", {})]
    assert {hit.source_uri.rsplit("/", 1)[-1] for hit in bridged} == {"monitor.txt", "offer.txt"}
    parents = [hit.parent_id for hit in three_way.results]
    assert None not in parents and len(set(parents)) == len(parents)  # every hit a parent passage, each once
    assert len(set(names(three_way))) == len(three_way.results)
