"""The fusion stage (retrieval.services.fusion_stage): deduplication by content, RRF with per-query leg
weights, score fusions, and the graph gate."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from engines import get_lexical_index
from engines.embedders import get_embedder
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base
from knowledge.selectors.search import analyzer_for_tenant
from retrieval.fusion_functions import RankedList
from retrieval.relevance import dense_relevance, lexical_relevance, passage_sample, query_background
from retrieval.relevance_calibration import calibrated as shown
from retrieval.services.fusion_stage import fuse, gate_graph
from tests.retrieval.services.conftest import fusion_settings, names, run

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def test_hybrid_keeps_one_of_identical_passages_with_one_hash_lookup(tenant, embedder, tmp_path):
    """Vector hits carry their content hash; the BM25 hits' hashes come with the one query that checks
    those chunks exist, while the query embeds. Two files with the same text still give one hit."""
    kb = create_knowledge_base(tenant=tenant, name="copies")
    same = "The SKY-20031 bulb resets after three power cycles of ten seconds each."
    for name, text in {"a.txt": same, "b.txt": same, "c.txt": "Kettles boil water in four minutes."}.items():
        (tmp_path / name).write_text(text)
    Ingester(kb).ingest(discover_files([tmp_path]))
    with CaptureQueriesContext(connection) as captured:
        response = run(kb, "How do I reset the SKY-20031 bulb?", mode="hybrid", top_k=5)
    assert sorted(names(response)) in (["a.txt", "c.txt"], ["b.txt", "c.txt"])
    assert set(response.results[0].retrievers) == {"vector", "bm25"}
    lookup = 'SELECT id, content_hash FROM "knowledge_chunk" WHERE'
    [sql] = [q["sql"] for q in captured.captured_queries if lookup in q["sql"]]
    looked_up = {int(i) for i in re.search(r"id = ANY\('\{([\d,]+)\}'", sql).group(1).split(",")}
    kettle = response.results[-1]
    assert names(response)[-1] == "c.txt" and set(kettle.retrievers) == {"vector"}
    assert kettle.chunk_id not in looked_up  # found by the dense leg only: its hash came with it


def test_the_graph_votes_only_for_passages_beyond_the_other_lists_heads():
    bm25 = RankedList("bm25", "q", 1.0, [(1, 9.0), (2, 8.0), (3, 7.0)])
    vector = RankedList("vector", "q", 1.0, [(4, 0.9), (5, 0.8)])
    graph = RankedList("graph", "q", 0.5, [(2, 5.0), (6, 4.0), (3, 3.0), (7, 2.0), (8, 1.0)])
    hashes = {chunk_id: f"h{chunk_id}" for chunk_id in range(1, 9)} | {8: "h4"}  # 8: a copy of 4
    gate = gate_graph([bm25, graph, vector], 2, hashes)
    assert gate.lists[0] is bm25 and gate.lists[2] is vector
    # 2 is BM25's second, 8 the same text as dense's first: no graph vote; 3 is BM25's third, beyond the head.
    assert gate.lists[1].hits == [(6, 4.0), (3, 3.0), (7, 2.0)] and gate.lists[1].weight == 0.5
    assert gate.head == {"h1", "h2", "h4", "h5"} and gate.weight == 0.5


def test_the_graph_gate_lets_the_graph_alone_or_an_open_head_through():
    bm25 = RankedList("bm25", "q", 1.0, [(1, 9.0)])
    graph = RankedList("graph", "q", 1.0, [(1, 5.0), (2, 4.0)])
    hashes = {1: "a", 2: "b"}
    for lists, head in (([graph], 10), ([bm25, graph], 0), ([bm25], 10)):  # graph mode, GRAPH_FUSION_HEAD 0, two-way
        gate = gate_graph(lists, head, hashes)
        assert gate.lists == lists and gate.head == frozenset()


@pytest.mark.parametrize("fusion", ["rrf", "minmax"])
def test_a_heavy_graph_list_reorders_below_the_head_never_the_head(settings, fusion):
    """Whatever its weight and the fusion, a graph vote lifts no passage over one another leg ranks in its head."""
    settings.GRAPH_FUSION_HEAD = 2
    bm25 = RankedList("bm25", "q", 1.0, [(1, 9.0), (2, 8.0), (3, 7.0), (4, 6.0)])
    graph = RankedList("graph", "q", 100.0, [(2, 5.0), (4, 4.0), (9, 3.0)])
    hashes = {chunk_id: f"h{chunk_id}" for chunk_id in (1, 2, 3, 4, 9)}
    fused = fuse(None, [bm25, graph], hashes, fusion_settings(fusion=fusion), None)  # neither fusion reads a tenant
    assert [candidate.chunk_id for candidate in fused][:3] == [1, 2, 4]
    assert "graph" not in fused[1].retrievers and fused[2].retrievers["graph"].rank == 1
    if fusion == "rrf":
        assert [candidate.chunk_id for candidate in fused][3:] == [9, 3]
    settings.GRAPH_FUSION_HEAD = 0  # ungated, the graph's first passage goes first
    ungated = fuse(None, [bm25, graph], hashes, fusion_settings(fusion=fusion), None)
    assert [candidate.chunk_id for candidate in ungated][:2] == [2, 4]


def graph_voted_other_ranks(response) -> list[int]:
    """For each hit the graph voted for that another leg found too: that leg's (best) rank. A bridge is
    placed, not voted for (at ranks 8-9: tests/retrieval/services/test_bridges.py)."""
    return [
        min(contribution["rank"] for name, contribution in hit.retrievers.items() if name != "graph")
        for hit in response.results
        if "graph" in hit.retrievers and set(hit.retrievers) != {"graph"} and not hit.retrievers["graph"].get("bridge")
    ]


def test_three_way_hybrid_leaves_the_other_legs_heads_to_them(sample_kb, settings):
    query = "Which battery pack does the PPR-9087 use?"
    settings.GRAPH_FUSION_HEAD = 0
    open_head = run(sample_kb, query, mode="hybrid", graph=True, top_k=100)
    assert open_head.weights["graph"] == settings.SEARCH_WEIGHT_GRAPH_HYBRID
    assert min(graph_voted_other_ranks(open_head)) <= 10  # ungated, the graph votes inside the others' heads
    settings.GRAPH_FUSION_HEAD = 10
    gated = run(sample_kb, query, mode="hybrid", graph=True, top_k=100)
    assert min(graph_voted_other_ranks(gated)) > 10  # gated, it still votes, beyond their top 10 only
    assert gated.candidates["graph"] == open_head.candidates["graph"]  # the leg itself ranked the same


def test_weights_and_rrf_k_are_applied(sample_kb):
    query = "firmware update failed"
    bm25_only = run(sample_kb, query, mode="bm25", top_k=5)
    heavy_bm25 = run(sample_kb, query, mode="hybrid", top_k=5, weights={"vector": 0.0, "bm25": 1.0})
    assert [h.chunk_id for h in heavy_bm25.results] == [h.chunk_id for h in bm25_only.results]
    small_k = run(sample_kb, query, mode="hybrid", top_k=5, rrf_k=1, fusion="rrf", leg_weights="fixed")
    assert small_k.results[0].fused_score == pytest.approx(
        sum(1 / (1 + c["rank"]) for c in small_k.results[0].retrievers.values())
    )


def calibrated(kb, hit, query: str) -> dict[str, float]:
    """Each retriever's evidence for the hit mapped onto [0, 1] as ``relevance`` maps it, in ``kb``'s version."""
    version = kb.active_version
    legs = {}
    if "vector" in hit.retrievers:
        vector = get_embedder(kb.embedding_model).embed_queries([query])[0]
        background = query_background(vector, passage_sample(version.pk, version.revision))
        legs["vector"] = dense_relevance(hit.retrievers["vector"]["score"], background)
    if "bm25" in hit.retrievers:
        ceiling = get_lexical_index().max_score(version.pk, analyzer_for_tenant(kb.tenant_id).tokens(query))
        legs["bm25"] = lexical_relevance(hit.retrievers["bm25"]["score"], ceiling)
    return legs


def test_rrf_weighs_each_leg_by_the_square_of_its_first_hits_relevance_for_this_query(sample_kb):
    query = "How should I store the lithium battery pack?"
    response = run(sample_kb, query, mode="hybrid", top_k=100, fusion="rrf", weights={"vector": 0.5})
    firsts = {
        leg: next(hit for hit in response.results if hit.retrievers.get(leg, {}).get("rank") == 1)
        for leg in ("vector", "bm25")
    }
    configured = {"vector": 0.5, "bm25": 1.0}
    evidence = {leg: configured[leg] * calibrated(sample_kb, hit, query)[leg] ** 2 for leg, hit in firsts.items()}
    weights = {leg: 1.5 * value / sum(evidence.values()) for leg, value in evidence.items()}  # the sum 0.5 + 1 kept
    assert weights["vector"] != pytest.approx(0.5, abs=0.05)  # the legs' evidence differs for this query
    for hit in response.results:
        expected = sum(weights[leg] / (60 + contribution["rank"]) for leg, contribution in hit.retrievers.items())
        assert hit.fused_score == pytest.approx(expected, abs=1e-5)
    fixed = run(sample_kb, query, mode="hybrid", top_k=100, fusion="rrf", weights={"vector": 0.5}, leg_weights="fixed")
    for hit in fixed.results:
        expected = sum((0.5 if leg == "vector" else 1.0) / (60 + c["rank"]) for leg, c in hit.retrievers.items())
        assert hit.fused_score == pytest.approx(expected, abs=1e-5)


def test_relevance_fusion_adds_each_legs_calibrated_relevance_by_its_weight(sample_kb):
    query = "How should I store the lithium battery pack?"
    response = run(sample_kb, query, mode="hybrid", top_k=10, fusion="relevance", weights={"vector": 0.5})
    assert names(response)[0] == "safety-datasheet-ppr-9087-battery.pdf"
    for hit in response.results:
        legs = calibrated(sample_kb, hit, query)
        assert hit.fused_score == pytest.approx(0.5 * legs.get("vector", 0) + legs.get("bm25", 0), abs=1e-5)
        # fusion sums the raw relevances; what the hit shows is the stronger one, calibrated
        assert hit.relevance == pytest.approx(shown(max(legs.values())), abs=1e-5)
    assert [hit.score for hit in response.results] == sorted((hit.score for hit in response.results), reverse=True)
    rrf = run(sample_kb, query, mode="hybrid", top_k=10, fusion="rrf", weights={"vector": 0.5})
    assert [hit.fused_score for hit in response.results] != [hit.fused_score for hit in rrf.results]


def test_minmax_fusion_scales_each_list_by_its_own_range(sample_kb):
    query = "firmware update failed"
    bm25_only = run(sample_kb, query, mode="bm25", top_k=5)
    fused = run(sample_kb, query, mode="hybrid", top_k=5, fusion="minmax", weights={"vector": 0.0, "bm25": 2.0})
    assert [h.chunk_id for h in fused.results] == [h.chunk_id for h in bm25_only.results]
    top, low = bm25_only.results[0].score, min(h.score for h in run(sample_kb, query, mode="bm25", top_k=100).results)
    assert fused.results[0].fused_score == pytest.approx(2.0)
    expected = 2.0 * (bm25_only.results[1].score - low) / (top - low)
    assert fused.results[1].fused_score == pytest.approx(expected, abs=1e-4)


def test_relevance_fusion_calibrates_each_hit_in_its_own_kb_version(tenant, embedder, tmp_path):
    """Two KBs searched together: a hit's relevance is read against its own version's BM25 ceiling and
    dense background (the versions are looked up once for all hits)."""
    kbs = []
    for name, texts in {
        "locks": {"lock.txt": "The PPR-9087 smart lock fits doors 35 to 80 mm thick.", "kettle.txt": "Kettles boil."},
        "doors": {"door.txt": "Fit the smart lock to a door 35 mm thick or more.", "tea.txt": "Green tea at 80 C."},
    }.items():
        folder = tmp_path / name
        folder.mkdir()
        for file_name, text in texts.items():
            (folder / file_name).write_text(text)
        kb = create_knowledge_base(tenant=tenant, name=name)
        Ingester(kb).ingest(discover_files([folder]))
        kbs.append(kb)
    query = "which doors does the smart lock fit"
    response = run(tenant, query, mode="hybrid", top_k=4, kb_ids=[kb.pk for kb in kbs], fusion="relevance")
    by_id = {kb.pk: kb for kb in kbs}
    assert {hit.kb_id for hit in response.results} == set(by_id)
    for hit in response.results:
        legs = calibrated(by_id[hit.kb_id], hit, query)
        assert hit.fused_score == pytest.approx(sum(legs.values()), abs=1e-5)
