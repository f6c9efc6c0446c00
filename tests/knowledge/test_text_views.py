"""GET /api/v1/documents/{id}/text: the extracted text a hit's locator points into, per tenant."""

from __future__ import annotations

import pytest

from knowledge.models import Document
from tests.conftest import client_for
from tests.factories import DocumentFactory, TenantFactory
from tests.knowledge.formats import write_docx_with_headings, write_pdf_with_table
from tests.knowledge.helpers import ingest

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def test_a_hit_locates_its_passage_in_the_documents_text(kb, tmp_path):
    write_docx_with_headings(tmp_path / "manual.docx")
    write_pdf_with_table(tmp_path / "prices.pdf")
    ingest(kb, tmp_path)
    client = client_for(kb.tenant)

    for query, name in (("yellow WAN port", "manual.docx"), ("58 EUR", "prices.pdf")):
        body = {"query": query, "top_k": 1, "kb_ids": [kb.pk]}
        (hit,) = client.post("/api/v1/retrieval/bm25", body, format="json").json()["results"]
        assert hit["source_uri"].endswith(name)
        answer = client.get(f"/api/v1/documents/{hit['doc_id']}/text")
        assert answer.status_code == 200, answer.content
        document = answer.json()
        assert (document["id"], document["knowledge_base"], document["length"]) == (
            hit["doc_id"], kb.pk, len(document["text"]),
        )  # fmt: skip
        start, end = hit["metadata"]["locator"]["chars"]
        assert query in document["text"][start:end]
        assert hit["content"].endswith(document["text"][start:end])  # a table chunk leads with its header
    docx = Document.objects.get(knowledge_base=kb, source_uri__endswith="manual.docx")
    assert docx.extracted_text.startswith("Unpack the unit.\n\nConnect the yellow WAN port.")


def test_another_tenants_or_a_missing_document_is_404(tenant):
    theirs = DocumentFactory(knowledge_base__tenant=TenantFactory(), extracted_text="secret")
    client = client_for(tenant)

    for document_id in (theirs.pk, theirs.pk + 1000):
        answer = client.get(f"/api/v1/documents/{document_id}/text")
        assert answer.status_code == 404
        assert answer.json()["error"]["code"] == "document_not_found"
    own = DocumentFactory(knowledge_base__tenant=tenant, extracted_text="", title="old")
    assert client.get(f"/api/v1/documents/{own.pk}/text").json()["text"] == ""
