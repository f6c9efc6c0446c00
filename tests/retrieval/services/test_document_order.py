"""Document-aware ranking (retrieval.services.document_order): aggregation, one hit per document, and
a failing document stage."""

import pytest

from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base, update_search_settings
from knowledge.models import Document
from tests.retrieval.services.conftest import hit_names, names, run

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


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
    manual = next(hit for hit in grouped.results if hit_names([hit]) == ["kettle-manual.txt"])
    first_manual_chunk = next(hit for hit in chunks.results if hit_names([hit]) == ["kettle-manual.txt"])
    assert manual.chunk_id == first_manual_chunk.chunk_id  # its best chunk is the hit
    others = [hit.chunk_id for hit in chunks.results if hit_names([hit]) == ["kettle-manual.txt"]][1:4]
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

    monkeypatch.setattr("retrieval.services.document_order.aggregate", broken)
    response = run(manuals, "kettle water", mode="bm25", top_k=10, aggregate="sum", group_by="document")
    assert [d["stage"] for d in response.degraded] == ["group"] and response.degraded[0]["cause"] == "internal_error"
    assert [hit.chunk_id for hit in response.results] == [hit.chunk_id for hit in plain.results]
