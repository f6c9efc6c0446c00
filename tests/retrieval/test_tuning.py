"""Which fusion settings a search runs with: the request's, its knowledge bases', the service's."""

from retrieval.tuning import DEFAULT_FUSION, DEFAULT_LEG_CANDIDATES, DEFAULT_LEG_WEIGHTS, effective_settings
from retrieval.types import SearchRequest


def request(**options) -> SearchRequest:
    return SearchRequest(query="q", **options)


def hybrid_weights(settings) -> dict[str, float]:
    return {**settings.SEARCH_WEIGHTS, "graph": settings.SEARCH_WEIGHT_GRAPH_HYBRID}


def test_without_kb_settings_the_service_settings_apply(settings):
    fusion = effective_settings(request(), [{}])
    assert fusion.weights == hybrid_weights(settings)
    assert (fusion.rrf_k, fusion.candidates, fusion.dense_weight_floor) == (
        settings.RRF_K, settings.SEARCH_CANDIDATES, settings.DENSE_WEIGHT_FLOOR
    )  # fmt: skip
    assert fusion.notes == ()


def test_a_kb_setting_replaces_the_service_one_and_the_request_replaces_both(settings):
    kb = {"weights": {"vector": 0.3}, "rrf_k": 20, "candidates": 50, "dense_weight_floor": 0.2, "group_by": "document"}
    fusion = effective_settings(request(), [kb])
    assert fusion.weights == {**hybrid_weights(settings), "vector": 0.3}
    assert (fusion.rrf_k, fusion.candidates, fusion.dense_weight_floor, fusion.group_by) == (20, 50, 0.2, "document")
    asked = effective_settings(
        request(weights={"bm25": 2.0}, rrf_k=5, candidates=70, dense_weight_floor=0.0, group_by="chunk"), [kb]
    )
    assert asked.weights == {**hybrid_weights(settings), "vector": 0.3, "bm25": 2.0}
    assert (asked.rrf_k, asked.candidates, asked.dense_weight_floor, asked.group_by) == (5, 70, 0.0, "chunk")


def test_kbs_that_disagree_fall_back_to_the_service_setting_with_a_note(settings):
    fusion = effective_settings(
        request(), [{"rrf_k": 20, "weights": {"vector": 0.5}}, {"rrf_k": 20, "weights": {"vector": 0.7}}]
    )
    assert fusion.rrf_k == 20  # they agree on this one
    assert fusion.weights["vector"] == settings.SEARCH_WEIGHTS["vector"]
    assert fusion.notes == ("the searched knowledge bases set different vector weights: the service setting applies",)
    # A KB without the key counts as the service default.
    assert effective_settings(request(), [{"rrf_k": 20}, {}]).rrf_k == settings.RRF_K


def test_the_fusion_method_is_the_services_unless_a_kb_or_the_request_chooses_another():
    assert effective_settings(request(), [{}]).fusion == DEFAULT_FUSION == "minmax"  # the protocol's winner
    assert effective_settings(request(), [{"fusion": "rrf"}]).fusion == "rrf"  # a KB's explicit setting stays
    assert effective_settings(request(fusion="relevance"), [{"fusion": "rrf"}]).fusion == "relevance"


def test_rrf_leg_weights_are_per_query_unless_a_kb_or_the_request_fixes_them():
    assert effective_settings(request(), [{}]).leg_weights == DEFAULT_LEG_WEIGHTS == "evidence"
    assert effective_settings(request(), [{"leg_weights": "fixed"}]).leg_weights == "fixed"
    assert effective_settings(request(leg_weights="evidence"), [{"leg_weights": "fixed"}]).leg_weights == "evidence"


def test_the_legs_rank_the_union_unless_a_kb_or_the_request_asks_for_their_own_candidates():
    assert effective_settings(request(), [{}]).leg_candidates == DEFAULT_LEG_CANDIDATES == "union"
    assert effective_settings(request(), [{"leg_candidates": "own"}]).leg_candidates == "own"
    assert effective_settings(request(leg_candidates="union"), [{"leg_candidates": "own"}]).leg_candidates == "union"


def test_candidates_never_fall_below_top_k():
    assert effective_settings(request(top_k=80), [{"candidates": 50}]).candidates == 80


def test_three_way_hybrid_has_its_own_graph_weight_and_graph_mode_keeps_the_full_one(settings):
    settings.SEARCH_WEIGHT_GRAPH_HYBRID, settings.SEARCH_WEIGHTS = 0.2, {**settings.SEARCH_WEIGHTS, "graph": 1.5}
    assert effective_settings(request(mode="hybrid", graph=True), [{}]).weights["graph"] == 0.2
    assert effective_settings(request(mode="graph"), [{}]).weights["graph"] == 1.5
    # A KB's graph weight (what `evaluate --sweep --write` measured) and the request's replace either default.
    assert effective_settings(request(mode="hybrid"), [{"weights": {"graph": 0.4}}]).weights["graph"] == 0.4
    assert effective_settings(request(mode="graph", weights={"graph": 3.0}), [{}]).weights["graph"] == 3.0
