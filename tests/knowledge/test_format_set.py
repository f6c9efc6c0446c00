"""The format set (tests/fixtures/format_set, docs/BENCHMARKS.md): enough documents of every format and
enough questions in both languages; every answer read by today's parsers with its row or label beside
it; no question on a PDF answerable from pypdf's plain text."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pypdf
import pytest

from knowledge.parsing import parse_file
from retrieval.evaluation.datasets import load_dataset
from tests.fixtures.format_set import make_documents
from tests.fixtures.format_set.answer_hits import holds_answer, squeezed
from tests.fixtures.format_set.content import DOCUMENTS
from tests.fixtures.format_set.questions import QUESTIONS
from tests.knowledge import formats

FOLDER = make_documents.FOLDER
OCR_KINDS = {"scan-pdf", "png", "jpeg"}
# What Tesseract misreads on the set's scans (the question stays in the set: a reader may miss it too).
OCR_MISREADS = {"fs45": 'Tesseract reads the inspector\'s name 周敏 as "Flax"'}


def lines_with(text: str, key: str, answer: str) -> list[str]:
    """The lines of ``text`` holding both the row's key and the answer: a reader kept them together.
    Spaces and case aside: OCR and the parsers space CJK text and units differently."""
    key, answer = squeezed(key), squeezed(answer)
    return [line for line in text.splitlines() if key in squeezed(line) and answer in squeezed(line)]


def pypdf_lines_with(path: Path, key: str, answer: str) -> list[str]:
    """The same check on pypdf's plain text, page by page."""
    found = []
    for page in pypdf.PdfReader(path).pages:
        found += lines_with(page.extract_text() or "", key, answer)
    return found


@pytest.fixture(scope="module")
def documents(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("format_set")
    make_documents.make_documents(folder)
    return folder


@pytest.fixture(scope="module")
def parsed_texts() -> dict[str, str]:
    """Each document's extracted text, parsed once for all its questions (OCR takes seconds a page)."""
    return {}


def test_the_set_is_big_enough_and_spans_every_format(documents):
    files = sorted(path.name for path in documents.iterdir())
    assert files == sorted(DOCUMENTS)
    kinds = collections.Counter(kind for kind, _ in DOCUMENTS.values())
    assert len(files) >= 20
    assert set(kinds) == {"xlsx", "csv", "pptx", "pdf", "scan-pdf", "png", "jpeg", "docx"}
    assert len(QUESTIONS) >= 40
    languages = collections.Counter(question.lang for question in QUESTIONS)
    assert languages["zh"] >= 15 and languages["en"] >= 15
    assert {question.where for question in QUESTIONS} == {"table cell", "slide", "spreadsheet row", "scanned page"}
    judged_kinds = {DOCUMENTS[question.doc][0] for question in QUESTIONS}
    assert judged_kinds == set(kinds)


def test_scans_have_no_text_layer(documents):
    for name, (kind, _) in DOCUMENTS.items():
        if kind == "scan-pdf":
            assert all(not (page.extract_text() or "").strip() for page in pypdf.PdfReader(documents / name).pages)


def test_the_committed_judgments_are_the_questions_and_load_as_a_beir_folder(documents):
    queries, qrels = make_documents.judgments()
    assert (FOLDER / "queries.jsonl").read_text(encoding="utf-8") == queries
    assert (FOLDER / "qrels" / "test.tsv").read_text(encoding="utf-8") == qrels
    dataset = load_dataset(FOLDER, "test", with_corpus=False)
    assert len(dataset.qrels) == len(QUESTIONS)
    assert all((documents / doc).is_file() for judged in dataset.qrels.values() for doc in judged)
    rows = [json.loads(line) for line in queries.splitlines()]
    assert all(row["answer"] and row["where"] for row in rows)


def test_lines_with_agrees_with_answer_hits():
    text = "| SKY-80942 | 24 months | US$39 |\nSKY-80942\nUS$39"
    assert lines_with(text, "sky-80942", "US$ 39") == ["| SKY-80942 | 24 months | US$39 |"]
    assert holds_answer(text, "sky-80942", "US$ 39")
    assert not holds_answer("SKY-80942\nUS$39", "SKY-80942", "US$39")


def test_the_pypdf_check_catches_a_table_written_row_by_row(tmp_path):
    """The check below can fail: fpdf2's own table writes each row on one line of pypdf's text."""
    path = formats.write_pdf_with_table(tmp_path / "rows.pdf")
    assert pypdf_lines_with(path, "SKY-200", "58 EUR")


@pytest.mark.parametrize(
    "question", [q for q in QUESTIONS if DOCUMENTS[q.doc][0] in ("pdf", "scan-pdf")], ids=lambda q: q.id
)
def test_no_pdf_question_is_answerable_from_pypdf_text(documents, question):
    assert pypdf_lines_with(documents / question.doc, question.key, question.answer) == []


@pytest.mark.parametrize(
    "question",
    [
        pytest.param(q, id=q.id, marks=[pytest.mark.xfail(reason=OCR_MISREADS[q.id], strict=True)])
        if q.id in OCR_MISREADS
        else pytest.param(q, id=q.id)
        for q in QUESTIONS
    ],
)
def test_the_parsers_read_each_answer_beside_its_row(documents, parsed_texts, question):
    if DOCUMENTS[question.doc][0] in OCR_KINDS and (reason := formats.ocr_missing()):
        pytest.skip(reason)
    if question.doc not in parsed_texts:
        parsed_texts[question.doc] = parse_file(documents / question.doc).text
    text = parsed_texts[question.doc]
    assert lines_with(text, question.key, question.answer), text
