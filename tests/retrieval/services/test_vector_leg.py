"""The dense leg (retrieval.services.vector_leg): query variants embedded in one batch, or the caller's
own vector searched."""

import pytest

from engines.embedders import get_embedder
from knowledge.models import Synonym
from retrieval.expansion import ExpansionOptions
from retrieval.types import QueryVector
from tests.retrieval.services.conftest import run

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


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


def _own_vector(embedder, kb, text: str) -> QueryVector:
    return QueryVector(kb.active_version.embedding_model, tuple(float(v) for v in embedder.embed_queries([text])[0]))


def test_with_the_callers_vector_the_embedder_is_never_called(sample_kb, embedder, monkeypatch):
    query = "how hot may the charger get"
    own = _own_vector(embedder, sample_kb, query)
    expected = [(hit.chunk_id, hit.score) for hit in run(sample_kb, query, mode="vector", top_k=10).results]

    def refuse(texts):
        raise AssertionError(f"embedded {texts}")

    monkeypatch.setattr(get_embedder(own.model), "embed_queries", refuse)
    response = run(sample_kb, query, mode="vector", top_k=10, query_vector=own)
    assert response.degraded == [] and "embed" not in response.timings_ms
    assert "embed" not in response.critical_path_ms
    assert [(hit.chunk_id, pytest.approx(hit.score, abs=1e-6)) for hit in response.results] == expected


def test_with_the_callers_vector_only_the_expansions_variants_are_embedded(sample_kb, embedder, monkeypatch):
    Synonym.objects.create(
        tenant=sample_kb.tenant, kind=Synonym.Kind.EXPLICIT, terms=["charger"], replacements=["lithium battery"]
    )
    query, variant = "how hot may the charger get", "how hot may the lithium battery get"
    own = _own_vector(embedder, sample_kb, query)
    model = get_embedder(own.model)
    embedded, embed_queries = [], model.embed_queries
    monkeypatch.setattr(model, "embed_queries", lambda texts: embedded.append(list(texts)) or embed_queries(texts))
    options = {"mode": "vector", "top_k": 20, "expand": ExpansionOptions(synonyms=True)}
    response = run(sample_kb, query, query_vector=own, **options)
    assert embedded == [[variant]]
    assert [q["text"] for q in response.queries] == [query, variant]
    assert {hit.retrievers["vector"]["query"] for hit in response.results} == {query, variant}
    by_text = run(sample_kb, query, **options)
    assert [(hit.chunk_id, pytest.approx(hit.score, abs=1e-6)) for hit in response.results] == [
        (hit.chunk_id, hit.score) for hit in by_text.results
    ]
