"""The dense leg (retrieval.services.vector_leg): query variants embedded in one batch."""

import pytest

from knowledge.models import Synonym
from retrieval.expansion import ExpansionOptions
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
