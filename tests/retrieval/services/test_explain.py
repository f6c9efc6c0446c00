"""The response's account of a search (retrieval.services.explain), from the stages' outputs."""

from dataclasses import replace

from retrieval.expansion.base import QueryVariant
from retrieval.fusion_functions import FusedCandidate, RankedList
from retrieval.services.document_order import DocumentOrder
from retrieval.services.explain import explain
from retrieval.services.legs import Retrieved
from retrieval.services.union import UnionScored
from retrieval.types import Degradation, Expansion, LegResult, Reranked, Weights
from tests.retrieval.services.conftest import fusion_settings


def degraded(stage: str) -> dict:
    return Degradation(stage, "internal_error", "boom").as_dict()


def test_degradations_come_in_the_pipelines_order_and_counts_are_what_each_leg_found_itself():
    original = QueryVariant("q", 1.0, "original")
    bm25 = LegResult(
        "bm25",
        lists=[RankedList("bm25", "q", 1.0, [(1, 3.0), (2, 2.0)]), RankedList("bm25", "q2", 0.5, [(2, 1.0), (3, 0.5)])],
        notes=["the custom dictionary changed"],
        degraded=[Degradation("feedback", "internal_error", "boom")],
    )
    vector = LegResult("vector", failure=Degradation("vector", "timeout", "slow"))
    retrieved = Retrieved([bm25, vector], {})
    unioned = replace(bm25, lists=[replace(bm25.lists[0], hits=[(1, 3.0), (2, 2.0), (9, 0.1)])])
    explanation = explain(
        fusion=fusion_settings(notes=("the searched knowledge bases set different rrf_k",)),
        expansion=Expansion([original], [degraded("expand")]),
        weights=Weights({"bm25": 1.0, "vector": 1.0, "graph": 0.0}, ["dense retrieval weighted 0.25"]),
        retrieved=retrieved,
        union=UnionScored([unioned, vector], [degraded("union")]),
        fused=[FusedCandidate(chunk_id, f"h{chunk_id}") for chunk_id in (1, 2, 3, 9)],
        documents=DocumentOrder([], {}, {}, [degraded("group")]),
        reranked=Reranked([], None, [degraded("rerank")]),
    )
    assert [entry["stage"] for entry in explanation.degraded] == [
        "expand", "vector", "union", "feedback", "group", "rerank"
    ]  # fmt: skip
    assert explanation.notes == [
        "the searched knowledge bases set different rrf_k", "dense retrieval weighted 0.25", "the custom dictionary changed"
    ]  # fmt: skip
    assert explanation.candidates == {"bm25": 3, "fused": 4}  # chunk 9 came from the union, not from BM25's search
    assert explanation.queries == [{"text": "q", "weight": 1.0, "origin": "original"}]
