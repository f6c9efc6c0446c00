"""Every format read end to end: a spreadsheet, slides, a PDF with a table, a scanned page and a DOCX with
a table are ingested, their chunks carry where they come from, their parse report is kept, and a search
finds a cell, a slide's note and a scanned line; an unreadable file fails alone."""

from __future__ import annotations

import pytest

from knowledge.models import Document
from retrieval.services.search import search
from retrieval.types import SearchRequest
from tests.knowledge.formats import (
    ocr_missing,
    write_docx_with_headings,
    write_pdf_with_table,
    write_pptx,
    write_scanned_pdf,
    write_xlsx,
)
from tests.knowledge.helpers import ingest

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def _top(kb, query: str, mode: str = "bm25"):
    return search(kb.tenant, SearchRequest(mode=mode, query=query, top_k=3, kb_ids=[kb.pk])).results[0]


def test_office_files_and_pdf_tables_are_ingested_with_their_locations(kb, tmp_path):
    write_xlsx(tmp_path / "catalogue.xlsx")
    write_pptx(tmp_path / "training.pptx")
    write_pdf_with_table(tmp_path / "prices.pdf")
    write_docx_with_headings(tmp_path / "manual.docx")
    (tmp_path / "broken.pptx").write_bytes(b"not slides")

    report = ingest(kb, tmp_path)

    assert (report.added, report.failed) == (4, 1)
    documents = {
        document.source_uri.rsplit("/", 1)[-1]: document for document in Document.objects.filter(knowledge_base=kb)
    }
    assert {name: document.doc_type for name, document in documents.items()} == {
        "catalogue.xlsx": "xlsx", "training.pptx": "pptx", "prices.pdf": "pdf", "manual.docx": "docx",
        "broken.pptx": "pptx",
    }  # fmt: skip
    assert documents["broken.pptx"].status == Document.Status.FAILED
    assert "could not read PPTX" in documents["broken.pptx"].error
    assert documents["catalogue.xlsx"].parse_report["warnings"] == ["sheet 'Internal' is hidden and was not read"]
    assert documents["prices.pdf"].parse_report["tables"] == 1

    row = _top(kb, "SKY-200 89.5")
    assert row.source_uri.endswith("catalogue.xlsx")
    assert row.metadata["sheet"] == "Prices"
    assert row.metadata["rows"] == [2, 4]
    assert "Price (EUR): 89.5" in row.content

    note = _top(kb, "audience yellow")
    assert note.source_uri.endswith("training.pptx")
    assert note.metadata["slide"] == 1

    cell = _top(kb, "58 EUR")
    assert cell.source_uri.endswith("prices.pdf")
    assert cell.content.startswith("Table 1: Router prices\n| Model | Price | Ports |")
    assert (cell.metadata["page"], cell.metadata["table"]) == (1, 1)

    wiring = _top(kb, "LAN blue")
    assert wiring.source_uri.endswith("manual.docx")
    assert wiring.section == "Installation > Wiring"


@pytest.mark.skipif(bool(ocr_missing()), reason=ocr_missing() or "OCR available")
def test_a_scanned_page_is_found_by_its_text(kb, tmp_path):
    write_scanned_pdf(tmp_path / "service.pdf", tmp_path.parent / "scan.png")

    ingest(kb, tmp_path)

    document = Document.objects.get(knowledge_base=kb)
    assert (document.status, document.parse_report["ocr_pages"]) == (Document.Status.READY, 1)
    hit = _top(kb, "保修期")
    assert hit.metadata == {**hit.metadata, "page": 2, "ocr": True}
