"""The search pipeline (retrieval.services.search.search): BM25, hybrid fusion, language-aware weights,
expansion, reranking and degradation, over the real database, tantivy index and model."""
import re
from pathlib import Path

import factory
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from engines import get_lexical_index
from engines.base import LexicalDocument

from knowledge.models import Chunk, DictionaryTerm, Document, Synonym
from knowledge.selectors import analyzer_for_tenant
from knowledge.documents import delete_document
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base, update_search_settings
from knowledge.lexical import rebuild_lexical_index
from retrieval.expansion import ExpansionOptions
from retrieval.relevance import dense_background, dense_relevance, lexical_relevance
from engines.rerankers import reset_reranker
from retrieval.fusion import RankedList
from retrieval.services.search import fuse, gate_graph, search
from retrieval.tuning import FusionSettings
from retrieval.types import SearchRequest
from tests.concurrency import wait_until
from tests.factories import ChunkFactory, DocumentFactory, KnowledgeBaseFactory, TenantFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def names(response) -> list[str]:
    return [Path(hit.source_uri).name for hit in response.results]


def run(kb_or_tenant, query, **options):
    tenant = getattr(kb_or_tenant, "tenant", kb_or_tenant)
    return search(tenant, SearchRequest(query=query, **options))


# --- BM25 -----------------------------------------------------------------------------------------


def test_identifier_queries_find_the_exact_chunk(sample_kb):
    response = run(sample_kb, "PPR-9087 installation", mode="bm25", top_k=5)
    assert all("PPR-9087" in hit.content for hit in response.results[:3])
    assert "ppr-9087-installation-manual.pdf" in names(response)
    response = run(sample_kb, "帮我查下订单 ORD-2026-000817 的进度", mode="bm25", top_k=3)
    assert names(response)[0] == "order-status.md"
    hit = response.results[0]
    assert "ORD-2026-000817" in hit.content
    assert hit.source == "bm25" and hit.retrievers["bm25"]["rank"] == 1
    assert hit.score == hit.retrievers["bm25"]["score"] > 0  # a single list shows its raw BM25 score


def test_bm25_never_calls_the_embedder(sample_kb):
    response = run(sample_kb, "Wi-Fi pairing error E-104", mode="bm25")
    assert names(response)[0] == "wifi-pairing.md"
    assert "embed" not in response.timings_ms and "vector" not in response.candidates


def test_bm25_respects_filters_and_the_tenant(sample_kb):
    response = run(sample_kb, "warranty months", mode="bm25", top_k=20, filters={"doc_type": "pdf"})
    assert response.results and {hit.doc_type for hit in response.results} == {"pdf"}
    other = TenantFactory()
    assert run(other, "warranty months", mode="bm25").results == []
    assert run(other, "warranty months", mode="hybrid").results == []


def test_filtered_bm25_without_the_ids_finds_the_hits_it_finds_inside_them(settings, lexical_index_dir):
    """A filter matching more chunks than LEXICAL_FILTER_MAX_IDS: BM25 searches without their ids and
    goes deeper while too few of its hits pass (here 1 in 25, so its first 10x over-fetch finds about 4
    of the 10 asked): the same hits and scores as searching inside the ids, none of another tenant's."""
    words = ["warranty", "months", "repair", "battery", "screen", "refund", "shipping", "invoice"]
    tenants = []
    for _ in range(2):
        kb = KnowledgeBaseFactory()
        document = DocumentFactory(knowledge_base=kb)
        ChunkFactory.create_batch(
            400,
            document=document,
            content=factory.Iterator([f"warranty {' '.join(words[: 1 + i % 8])} {'months ' * (i % 5)}item {i}"
                                      for i in range(400)]),
            metadata=factory.Iterator([{"shop": i % 25} for i in range(400)]),
        )
        rebuild_lexical_index(kb.active_version)
        tenants.append(kb.tenant)
    request = {"mode": "bm25", "top_k": 10, "candidates": 10, "filters": {"metadata.shop": 3}}
    settings.SEARCH_CACHE_TTL_S = 0
    settings.LEXICAL_FILTER_MAX_IDS = 1000  # 16 ids match: BM25 searches inside them
    inside = run(tenants[0], "warranty months", **request)
    settings.LEXICAL_FILTER_MAX_IDS = 5  # too many: BM25 searches without them
    deeper = run(tenants[0], "warranty months", **request)
    assert len(inside.results) == 10
    hits = [(hit.chunk_id, hit.score) for hit in inside.results]
    assert [(hit.chunk_id, hit.score) for hit in deeper.results] == hits
    own = set(Chunk.objects.filter(tenant=tenants[0], metadata__shop=3).values_list("pk", flat=True))
    assert {hit.chunk_id for hit in deeper.results} <= own


# --- hybrid ---------------------------------------------------------------------------------------


def test_hybrid_fuses_both_lists_and_explains_every_hit(sample_kb):
    query = "How should I store the lithium battery pack?"
    response = run(sample_kb, query, mode="hybrid", top_k=5, fusion="rrf", leg_weights="fixed")
    top = response.results[0]
    assert names(response)[0] == "safety-datasheet-ppr-9087-battery.pdf"
    assert set(top.retrievers) == {"vector", "bm25"}
    k = 60
    expected = sum(1 / (k + c["rank"]) for c in top.retrievers.values())
    assert top.fused_score == pytest.approx(expected, abs=1e-6)
    assert top.score == top.fused_score
    assert top.matched_queries == ["How should I store the lithium battery pack?"]
    assert response.weights == {"vector": 1.0, "bm25": 1.0, "graph": 0.0}
    assert {"expand", "embed", "vector", "bm25", "fuse", "total"} <= set(response.timings_ms)
    assert response.candidates["fused"] >= response.candidates["vector"] >= 5
    assert response.reranked is False and response.degraded == []
    scores = [hit.score for hit in response.results]
    assert scores == sorted(scores, reverse=True)


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


# --- three-way hybrid: the graph gate ---------------------------------------------------------------


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


def fusion_settings(fusion: str) -> FusionSettings:
    return FusionSettings(
        weights={}, fusion=fusion, leg_weights="fixed", leg_candidates="own", rrf_k=60, candidates=100,
        dense_weight_floor=0.0,
        aggregate="none", group_by="chunk", feedback_docs=0, feedback_terms=10, feedback_query_weight=0.5,
    )  # fmt: skip


@pytest.mark.parametrize("fusion", ["rrf", "minmax"])
def test_a_heavy_graph_list_reorders_below_the_head_never_the_head(settings, fusion):
    """Whatever its weight and the fusion, a graph vote lifts no passage over one another leg ranks in its head."""
    settings.GRAPH_FUSION_HEAD = 2
    bm25 = RankedList("bm25", "q", 1.0, [(1, 9.0), (2, 8.0), (3, 7.0), (4, 6.0)])
    graph = RankedList("graph", "q", 100.0, [(2, 5.0), (4, 4.0), (9, 3.0)])
    hashes = {chunk_id: f"h{chunk_id}" for chunk_id in (1, 2, 3, 4, 9)}
    fused = fuse(None, [bm25, graph], hashes, fusion_settings(fusion), None)  # neither fusion reads a tenant
    assert [candidate.chunk_id for candidate in fused][:3] == [1, 2, 4]
    assert "graph" not in fused[1].retrievers and fused[2].retrievers["graph"].rank == 1
    if fusion == "rrf":
        assert [candidate.chunk_id for candidate in fused][3:] == [9, 3]
    settings.GRAPH_FUSION_HEAD = 0  # ungated, the graph's first passage goes first
    ungated = fuse(None, [bm25, graph], hashes, fusion_settings(fusion), None)
    assert [candidate.chunk_id for candidate in ungated][:2] == [2, 4]


def graph_voted_other_ranks(response) -> list[int]:
    """For each hit the graph voted for that another leg found too: that leg's (best) rank."""
    return [
        min(contribution["rank"] for name, contribution in hit.retrievers.items() if name != "graph")
        for hit in response.results
        if "graph" in hit.retrievers and set(hit.retrievers) != {"graph"}
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
    assert small_k.results[0].fused_score == pytest.approx(sum(1 / (1 + c["rank"]) for c in small_k.results[0].retrievers.values()))


def calibrated(kb, hit, query: str) -> dict[str, float]:
    """Each retriever's evidence for the hit mapped onto [0, 1] as ``relevance`` maps it, in ``kb``'s version."""
    version = kb.active_version
    legs = {}
    if "vector" in hit.retrievers:
        background = dense_background(version.pk, version.revision)
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


def test_each_leg_ranks_the_union_of_both_legs_candidates_by_its_own_score(sample_kb):
    """``leg_candidates: "union"``: a passage one leg found gets the other leg's score too, the score that
    leg gives it in a search of its own (the dense cosine; the BM25 score, or nothing without a shared
    word), and each leg ranks the whole union by it. Lists shorter than the head each leg scores of the
    other's (``UNION_HEAD``), so that the union is every candidate, and the legs' candidates differ."""
    query = "How should I store the lithium battery pack?"
    own = run(sample_kb, query, mode="hybrid", top_k=8, candidates=8, leg_candidates="own")
    union = run(sample_kb, query, mode="hybrid", top_k=8, candidates=8, leg_candidates="union")
    assert own.candidates["fused"] > 8  # passages only one leg found
    assert union.candidates == own.candidates  # what each leg found, as before
    assert "union" in union.timings_ms and "union" not in own.timings_ms and not union.degraded
    cosine = {hit.chunk_id: hit.score for hit in run(sample_kb, query, mode="vector", top_k=400, candidates=400).results}
    bm25 = {hit.chunk_id: hit.score for hit in run(sample_kb, query, mode="bm25", top_k=400, candidates=400).results}
    dense_found = {hit.chunk_id for hit in run(sample_kb, query, mode="vector", top_k=8, candidates=8).results}
    assert any(hit.chunk_id not in dense_found for hit in union.results)  # found by BM25 alone, scored by both
    for hit in union.results:
        assert hit.retrievers["vector"]["score"] == pytest.approx(cosine[hit.chunk_id], abs=1e-5)
        if hit.chunk_id in bm25:
            assert hit.retrievers["bm25"]["score"] == pytest.approx(bm25[hit.chunk_id], abs=1e-4)
        else:
            assert "bm25" not in hit.retrievers
    for leg in ("vector", "bm25"):
        ranked = sorted((hit.retrievers[leg] for hit in union.results if leg in hit.retrievers), key=lambda c: c["rank"])
        assert [c["score"] for c in ranked] == sorted((c["score"] for c in ranked), reverse=True)


def test_a_failing_union_keeps_the_lists_as_found_and_says_so(sample_kb, monkeypatch):
    def broken(*args):
        raise RuntimeError("boom")

    query = "How should I store the lithium battery pack?"
    own = run(sample_kb, query, mode="hybrid", top_k=20, candidates=8, leg_candidates="own")
    monkeypatch.setattr("retrieval.services.search._leg_over", broken)
    response = run(sample_kb, query, mode="hybrid", top_k=20, candidates=8, leg_candidates="union")
    assert [(d["stage"], d["cause"]) for d in response.degraded] == [("union", "internal_error")]
    assert [hit.chunk_id for hit in response.results] == [hit.chunk_id for hit in own.results]


def test_one_leg_is_its_own_union(sample_kb):
    for query, mode in (("warranty months", "bm25"), ("鱼香肉丝里面有鱼吗", "hybrid")):  # hybrid: dense skipped
        union, own = (run(sample_kb, query, mode=mode, top_k=10, leg_candidates=c) for c in ("union", "own"))
        assert "union" not in union.timings_ms
        assert [(h.chunk_id, h.fused_score) for h in union.results] == [(h.chunk_id, h.fused_score) for h in own.results]


def test_relevance_fusion_adds_each_legs_calibrated_relevance_by_its_weight(sample_kb):
    query = "How should I store the lithium battery pack?"
    response = run(sample_kb, query, mode="hybrid", top_k=10, fusion="relevance", weights={"vector": 0.5})
    assert names(response)[0] == "safety-datasheet-ppr-9087-battery.pdf"
    for hit in response.results:
        legs = calibrated(sample_kb, hit, query)
        assert hit.fused_score == pytest.approx(0.5 * legs.get("vector", 0) + legs.get("bm25", 0), abs=1e-5)
        assert hit.relevance == pytest.approx(max(legs.values()), abs=1e-5)  # relevance itself is unchanged
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


def test_the_kbs_search_settings_apply_and_a_request_overrides_them(sample_kb):
    query = "firmware update failed"
    bm25_only = run(sample_kb, query, mode="bm25", top_k=5)
    update_search_settings(sample_kb, {"weights": {"vector": 0.0}, "fusion": "rrf", "rrf_k": 1})
    kb_settings = run(sample_kb, query, mode="hybrid", top_k=5)
    assert kb_settings.weights["vector"] == 0.0
    assert [h.chunk_id for h in kb_settings.results] == [h.chunk_id for h in bm25_only.results]
    assert kb_settings.results[0].fused_score == pytest.approx(1 / (1 + 1))  # k = 1, rank 1, weight 1
    asked = run(sample_kb, query, mode="hybrid", top_k=5, weights={"vector": 1.0}, rrf_k=60)
    assert asked.weights["vector"] == 1.0 and "vector" in {r for h in asked.results for r in h.retrievers}
    # The active version's own settings win over the KB's.
    update_search_settings(sample_kb, {"weights": {"vector": 0.5}}, version=sample_kb.active_version)
    assert run(sample_kb, query, mode="hybrid", top_k=5).weights["vector"] == 0.5


def test_the_kbs_language_floor_weighs_the_dense_leg_of_uncovered_languages(sample_kb):
    update_search_settings(sample_kb, {"dense_weight_floor": 0.25})
    response = run(sample_kb, "鱼香肉丝里面有鱼吗", mode="hybrid", top_k=3)
    assert response.weights["vector"] == 0.25
    assert any("weighted 0.25" in note for note in response.notes)
    assert run(sample_kb, "鱼香肉丝里面有鱼吗", mode="hybrid", top_k=3, dense_weight_floor=0.0).weights["vector"] == 0.0


# --- RM3 feedback on the BM25 leg ------------------------------------------------------------------


@pytest.fixture
def descaling(tenant, embedder, tmp_path):
    """A note that answers "kettle descaling" in other words than the query's, and one that names both."""
    kb = create_knowledge_base(tenant=tenant, name="descaling")
    notes = {
        "kettle.txt": "Kettle descaling: citric acid dissolves limescale; kettle limescale needs citric acid monthly.",
        "limescale.txt": "Limescale deposits dissolve in citric acid within an hour.",
        "garden.txt": "Water the tomato seedlings every morning.",
    }
    for name, text in notes.items():
        (tmp_path / name).write_text(text)
    Ingester(kb).ingest(discover_files([tmp_path]))
    return kb


def test_feedback_reaches_a_passage_in_the_words_of_the_top_passages(descaling):
    plain = run(descaling, "kettle descaling", mode="bm25", top_k=5)
    assert names(plain) == ["kettle.txt"]  # the other note shares no word with the query
    fed = run(descaling, "kettle descaling", mode="bm25", top_k=5, feedback_docs=1, feedback_terms=5)
    assert names(fed) == ["kettle.txt", "limescale.txt"]
    assert {hit.retrievers["bm25"]["query"] for hit in fed.results} == {"kettle descaling"}
    assert all(0 < hit.relevance <= 1 for hit in fed.results) and not fed.degraded
    assert "feedback" in fed.timings_ms and "feedback" not in plain.timings_ms
    # The original query's whole weight: the first pass again.
    same = run(descaling, "kettle descaling", mode="bm25", top_k=5, feedback_docs=1, feedback_query_weight=1.0)
    assert [hit.chunk_id for hit in same.results] == [hit.chunk_id for hit in plain.results]


def test_a_kbs_feedback_setting_applies_unless_the_request_turns_it_off(descaling):
    update_search_settings(descaling, {"feedback_docs": 1, "feedback_terms": 5})
    assert "limescale.txt" in names(run(descaling, "kettle descaling", mode="bm25", top_k=5))
    assert names(run(descaling, "kettle descaling", mode="bm25", top_k=5, feedback_docs=0)) == ["kettle.txt"]


def test_a_failing_feedback_pass_keeps_the_first_pass_and_says_so(descaling, monkeypatch):
    def broken(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr("retrieval.services.search.feedback_query", broken)
    response = run(descaling, "kettle descaling", mode="bm25", top_k=5, feedback_docs=1)
    assert names(response) == ["kettle.txt"]
    assert [(d["stage"], d["cause"]) for d in response.degraded] == [("feedback", "internal_error")]


# --- document-aware ranking -------------------------------------------------------------------------


@pytest.fixture
def manuals(tenant, embedder, tmp_path):
    """A long manual cut into several chunks that all speak of the kettle, and two one-chunk notes."""
    kb = create_knowledge_base(tenant=tenant, name="manuals", chunk_size=40, chunk_overlap=0)
    sentences = [
        "The kettle boils water in four minutes.",
        "Descale the kettle every month with vinegar and water.",
        "The kettle switches off when the water boils.",
        "Never fill the kettle above the maximum water mark.",
        "The kettle base must stay dry; wipe spilled water at once.",
    ]
    (tmp_path / "kettle-manual.txt").write_text("\n\n".join(sentence * 3 for sentence in sentences))
    (tmp_path / "note-kettle.txt").write_text("Kettle water boils fast: the kettle boils water.")
    (tmp_path / "note-garden.txt").write_text("Water the tomato seedlings every morning.")
    Ingester(kb).ingest(discover_files([tmp_path]))
    assert Document.objects.get(knowledge_base=kb, source_uri__endswith="kettle-manual.txt").chunk_count >= 3
    return kb


def test_grouping_by_document_gives_one_hit_per_document_with_its_passages(manuals):
    chunks = run(manuals, "kettle water", mode="bm25", top_k=10)
    assert len(names(chunks)) > len(set(names(chunks)))  # the manual's chunks are several hits
    grouped = run(manuals, "kettle water", mode="bm25", top_k=10, group_by="document")
    assert len(names(grouped)) == len(set(names(grouped))) == 3
    manual = next(hit for hit in grouped.results if names_of([hit]) == ["kettle-manual.txt"])
    first_manual_chunk = next(hit for hit in chunks.results if names_of([hit]) == ["kettle-manual.txt"])
    assert manual.chunk_id == first_manual_chunk.chunk_id  # its best chunk is the hit
    others = [hit.chunk_id for hit in chunks.results if names_of([hit]) == ["kettle-manual.txt"]][1:4]
    assert [p["chunk_id"] for p in manual.passages] == others
    assert all(p["content"] and p["fused_score"] > 0 for p in manual.passages)
    assert run(manuals, "kettle water", mode="bm25", top_k=1, group_by="document").results[0].passages is not None
    assert all(hit.passages is None for hit in chunks.results)


def test_sum_aggregation_scores_a_document_by_all_its_matched_chunks(manuals):
    plain = run(manuals, "kettle water", mode="hybrid", top_k=20)
    summed = run(manuals, "kettle water", mode="hybrid", top_k=20, aggregate="sum")
    assert all(hit.document_score is None for hit in plain.results)
    by_document: dict[int, list[float]] = {}
    for hit in plain.results:
        by_document.setdefault(hit.doc_id, []).append(hit.fused_score)
    expected = {
        doc: sum(s * 0.5**i for i, s in enumerate(sorted(scores, reverse=True))) for doc, scores in by_document.items()
    }
    assert {hit.doc_id: hit.document_score for hit in summed.results} == pytest.approx(expected, abs=1e-6)
    scores = [hit.document_score for hit in summed.results]
    assert scores == sorted(scores, reverse=True)  # ranked by their document's score


def test_a_kbs_grouping_applies_unless_the_request_says_otherwise(manuals):
    update_search_settings(manuals, {"group_by": "document", "aggregate": "max"})
    grouped = run(manuals, "kettle water", mode="bm25", top_k=10)
    assert len(names(grouped)) == len(set(names(grouped))) and grouped.results[0].document_score is not None
    chunks = run(manuals, "kettle water", mode="bm25", top_k=10, group_by="chunk", aggregate="none")
    assert len(names(chunks)) > len(set(names(chunks)))


def test_a_failing_document_stage_keeps_the_fused_order_and_says_so(manuals, monkeypatch):
    plain = run(manuals, "kettle water", mode="bm25", top_k=10)

    def broken(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr("retrieval.services.search.aggregate", broken)
    response = run(manuals, "kettle water", mode="bm25", top_k=10, aggregate="sum", group_by="document")
    assert [d["stage"] for d in response.degraded] == ["group"] and response.degraded[0]["cause"] == "internal_error"
    assert [hit.chunk_id for hit in response.results] == [hit.chunk_id for hit in plain.results]


def names_of(hits) -> list[str]:
    return [Path(hit.source_uri).name for hit in hits]


def test_chinese_query_skips_the_english_only_dense_leg(sample_kb):
    response = run(sample_kb, "鱼香肉丝里面有鱼吗", mode="hybrid", top_k=3)
    assert response.weights["vector"] == 0.0
    assert any("does not cover" in note for note in response.notes)
    assert names(response)[0] == "sichuan-kitchen-menu.txt"
    assert set(response.results[0].retrievers) == {"bm25"}
    english = run(sample_kb, "firmware update", mode="hybrid", top_k=3)
    assert english.weights["vector"] == 1.0 and english.notes == []


def test_vector_mode_keeps_the_dense_leg_whatever_the_language(sample_kb):
    response = run(sample_kb, "鱼香肉丝", mode="vector", top_k=3)
    assert response.weights == {"vector": 1.0, "bm25": 0.0, "graph": 0.0} and len(response.results) == 3


def test_the_bm25_leg_runs_while_the_query_embeds_and_the_critical_path_adds_up(
    tenant, tmp_path, remote_model, embedding_server, spans
):
    """The remote embedder holds the query's vector until the BM25 leg is done (its keyword index
    search on the lexical pool and its check of the hits on the request thread): a pipeline that waited
    for the embedding before or while running BM25 would never see it done and fail below."""
    kb = create_knowledge_base(tenant=tenant, name="remote", embedding_model="remote:minilm")
    (tmp_path / "lock.txt").write_text("The PPR-9087 lock fits doors 35 to 80 mm thick.")
    (tmp_path / "kettle.txt").write_text("Kettles boil water in four minutes.")
    Ingester(kb).ingest(discover_files([tmp_path]))
    answer = embedding_server.respond

    def bm25_spans():
        return [span for span in spans.get_finished_spans() if span.name == "search.bm25"]

    def after_the_bm25_leg(request):
        # A search that waited for the embedding first never ends the BM25 leg: the wait fails, and with
        # it the embedding request, and the assertions below.
        wait_until(lambda: len(bm25_spans()) >= 3, timeout=10, message="the BM25 leg to end while embedding")
        return answer(request)

    embedding_server.respond = after_the_bm25_leg
    spans.clear()
    response = run(kb, "How thick can the door be for the PPR-9087 lock?", mode="hybrid", top_k=2)

    assert names(response)[0] == "lock.txt" and set(response.results[0].retrievers) == {"vector", "bm25"}
    [embed] = [span for span in spans.get_finished_spans() if span.name == "search.embed"]
    prepare, index_search, check = sorted(bm25_spans(), key=lambda span: span.start_time)
    vector_plan, vector_search = sorted(
        (span for span in spans.get_finished_spans() if span.name == "search.vector"), key=lambda span: span.start_time
    )
    # The BM25 leg was done while the query was still embedding (when the embedding thread started its
    # span is the scheduler's choice: under load it can start after the whole leg).
    assert check.end_time < embed.end_time
    assert vector_search.start_time >= embed.end_time
    path = response.critical_path_ms
    assert {"embed", "bm25", "vector"} <= set(path)
    # The request thread's own stages and waits add up to the total; counting the overlapped embedding
    # in full beside the BM25 leg (a sequential account) would exceed it.
    assert sum(path.values()) == pytest.approx(response.timings_ms["total"], abs=0.05)


# --- expansion ------------------------------------------------------------------------------------


def test_synonyms_reach_documents_the_query_words_miss(sample_kb):
    query = "这家店有过敏保护吗"
    plain = run(sample_kb, query, mode="hybrid", top_k=3, expand=ExpansionOptions(synonyms=True))
    assert "restaurant-food-safety.md" not in names(plain)
    Synonym.objects.create(tenant=sample_kb.tenant, kind=Synonym.Kind.EXPLICIT, terms=["过敏"], replacements=["饮食禁忌"], weight=0.8)
    expanded = run(sample_kb, query, mode="hybrid", top_k=10, expand=ExpansionOptions(synonyms=True))
    assert [(q["text"], q["origin"], q["weight"]) for q in expanded.queries] == [
        (query, "original", 1.0),
        ("这家店有饮食禁忌保护吗", "synonym", 0.8),
    ]
    found = [hit for hit in expanded.results if Path(hit.source_uri).name == "restaurant-food-safety.md"]
    assert found and "这家店有饮食禁忌保护吗" in found[0].matched_queries
    # first in the synonym's own list: its section on the matter (the document is cut at its headings)
    synonym_list = run(sample_kb, "这家店有饮食禁忌保护吗", mode="bm25", top_k=1).results
    assert names_of(synonym_list) == ["restaurant-food-safety.md"]
    assert synonym_list[0].section == "本店配备饮食禁忌防御机制"
    off = run(sample_kb, query, mode="hybrid", top_k=3, expand=ExpansionOptions(synonyms=False))
    assert [q["origin"] for q in off.queries] == ["original"]


def test_each_query_variant_is_searched_with_its_own_vector(sample_kb):
    """Variants are embedded in one batch: each dense list must come from its own text's vector."""
    Synonym.objects.create(
        tenant=sample_kb.tenant, kind=Synonym.Kind.EXPLICIT, terms=["charger"], replacements=["lithium battery"]
    )
    query = "how hot may the charger get"
    expanded = run(sample_kb, query, mode="vector", top_k=20, expand=ExpansionOptions(synonyms=True))
    assert [q["text"] for q in expanded.queries] == [query, "how hot may the lithium battery get"]
    direct = {
        text: {hit.chunk_id: hit.score for hit in run(sample_kb, text, mode="vector", top_k=100).results}
        for text in (q["text"] for q in expanded.queries)
    }
    contributions = [hit.retrievers["vector"] for hit in expanded.results]
    assert {c["query"] for c in contributions} == set(direct)  # both variants contributed hits
    for hit, contribution in zip(expanded.results, contributions):
        assert contribution["score"] == pytest.approx(direct[contribution["query"]][hit.chunk_id], abs=1e-5)


# --- custom dictionary ----------------------------------------------------------------------------


def test_protected_terms_need_a_rebuild_and_say_so(tenant, embedder, tmp_path):
    kb = create_knowledge_base(tenant=tenant, name="menu")
    (tmp_path / "menu.txt").write_text("招牌菜：鱼香肉丝，酸甜微辣。\n\n另有宫保鸡丁。")
    Ingester(kb).ingest(discover_files([tmp_path]))
    DictionaryTerm.objects.create(tenant=tenant, kind=DictionaryTerm.Kind.TERM, value="鱼香肉丝")
    stale = run(kb, "鱼香肉丝", mode="bm25")
    assert any("rebuild_lexical_index" in note for note in stale.notes)
    assert rebuild_lexical_index(kb.active_version) == kb.active_version.chunks.count() > 0
    fresh = run(kb, "鱼香肉丝", mode="bm25")
    assert fresh.notes == []
    assert "鱼香肉丝" in fresh.results[0].content


# --- ingestion keeps the lexical index in step ------------------------------------------------------


def test_replaced_and_deleted_documents_leave_the_keyword_index(tenant, embedder, tmp_path):
    kb = create_knowledge_base(tenant=tenant, name="docs")
    path = tmp_path / "note.txt"
    path.write_text("The zeppelin departs at dawn.")
    Ingester(kb).ingest(discover_files([tmp_path]))
    assert names(run(kb, "zeppelin", mode="bm25")) == ["note.txt"]
    path.write_text("The submarine departs at dusk.")
    Ingester(kb).ingest(discover_files([tmp_path]))
    assert run(kb, "zeppelin", mode="bm25").results == []
    assert names(run(kb, "submarine", mode="bm25")) == ["note.txt"]
    delete_document(Document.objects.get(knowledge_base=kb))
    assert run(kb, "submarine", mode="bm25").results == []


# --- reranking ------------------------------------------------------------------------------------


def test_reranking_reorders_the_head(sample_kb, rerank_server):
    response = run(sample_kb, "battery storage temperature", mode="hybrid", top_k=5, rerank=True)
    assert response.reranked is True and response.degraded == []
    scores = [hit.rerank_score for hit in response.results]
    assert scores == sorted(scores, reverse=True)
    assert all(hit.score == hit.rerank_score for hit in response.results)
    assert "rerank" in response.timings_ms


@pytest.mark.parametrize("fault", ["500", "garbage", "null"])
def test_reranker_faults_fall_back_to_the_fused_order(sample_kb, rerank_server, fault):
    baseline = run(sample_kb, "battery storage temperature", mode="hybrid", top_k=5)
    rerank_server.mode = fault
    response = run(sample_kb, "battery storage temperature", mode="hybrid", top_k=5, rerank=True)
    assert response.reranked is False
    assert [d["stage"] for d in response.degraded] == ["rerank"]
    assert [h.chunk_id for h in response.results] == [h.chunk_id for h in baseline.results]


def test_rerank_without_a_reranker_says_so(sample_kb, settings):
    settings.RERANKER_URL = settings.RERANKER_MODEL = ""
    reset_reranker()
    response = run(sample_kb, "battery", mode="hybrid", top_k=3, rerank=True)
    assert response.reranked is False
    assert response.degraded == [{"stage": "rerank", "cause": "not_configured", "message": response.degraded[0]["message"]}]
    assert len(response.results) == 3


def test_an_orphan_keyword_entry_never_takes_a_real_chunks_place(tenant, embedder, tmp_path):
    """An index entry for a chunk the database no longer holds (a crash between the commit and the
    index write) is dropped and BM25 goes deeper, so the real chunk still fills the only slot."""
    kb = create_knowledge_base(tenant=tenant, name="docs")
    (tmp_path / "note.txt").write_text("The zeppelin departs at dawn.")
    Ingester(kb).ingest(discover_files([tmp_path]))
    orphan = LexicalDocument(chunk_id=10**12, doc_id=10**12, tenant_id=tenant.pk, text="zeppelin zeppelin zeppelin")
    state = {"analyzer_version": "", "dictionary_fingerprint": ""}
    get_lexical_index().replace_documents(kb.active_version.pk, [], [orphan], **state)
    assert get_lexical_index().search(kb.active_version.pk, tenant.pk, ["zeppelin"], 1, None)[0].chunk_id == 10**12
    response = run(kb, "zeppelin", mode="bm25", top_k=1, candidates=1)
    assert names(response) == ["note.txt"]
    assert response.candidates["bm25"] == 1
