"""The search pipeline end to end (retrieval.services.search.search): what a response says, tenant
and filter scoping, expansion, KB settings and the keyword index kept in step with ingestion, over the
real database, tantivy index and model. Each stage's own behaviour is tested beside its module."""

from pathlib import Path

import pytest

from knowledge.documents import delete_document
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base, update_search_settings
from knowledge.models import Document, Synonym
from retrieval.expansion import ExpansionOptions
from tests.factories import TenantFactory
from tests.retrieval.services.conftest import hit_names, names, run

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


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


def test_bm25_respects_filters_and_the_tenant(sample_kb):
    response = run(sample_kb, "warranty months", mode="bm25", top_k=20, filters={"doc_type": "pdf"})
    assert response.results and {hit.doc_type for hit in response.results} == {"pdf"}
    other = TenantFactory()
    assert run(other, "warranty months", mode="bm25").results == []
    assert run(other, "warranty months", mode="hybrid").results == []


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


def test_synonyms_reach_documents_the_query_words_miss(sample_kb):
    query = "这家店有过敏保护吗"
    plain = run(sample_kb, query, mode="hybrid", top_k=3, expand=ExpansionOptions(synonyms=True))
    assert "restaurant-food-safety.md" not in names(plain)
    Synonym.objects.create(
        tenant=sample_kb.tenant, kind=Synonym.Kind.EXPLICIT, terms=["过敏"], replacements=["饮食禁忌"], weight=0.8
    )
    expanded = run(sample_kb, query, mode="hybrid", top_k=10, expand=ExpansionOptions(synonyms=True))
    assert [(q["text"], q["origin"], q["weight"]) for q in expanded.queries] == [
        (query, "original", 1.0),
        ("这家店有饮食禁忌保护吗", "synonym", 0.8),
    ]
    found = [hit for hit in expanded.results if Path(hit.source_uri).name == "restaurant-food-safety.md"]
    assert found and "这家店有饮食禁忌保护吗" in found[0].matched_queries
    # first in the synonym's own list: its section on the matter (the document is cut at its headings)
    synonym_list = run(sample_kb, "这家店有饮食禁忌保护吗", mode="bm25", top_k=1).results
    assert hit_names(synonym_list) == ["restaurant-food-safety.md"]
    assert synonym_list[0].section == "本店配备饮食禁忌防御机制"
    off = run(sample_kb, query, mode="hybrid", top_k=3, expand=ExpansionOptions(synonyms=False))
    assert [q["origin"] for q in off.queries] == ["original"]


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
