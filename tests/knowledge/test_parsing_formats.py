"""knowledge.parsing on spreadsheets, slides, PDF tables, DOCX structure and scans (OCR), with the parse
report; the files are made in tmp_path (tests/knowledge/formats.py)."""

from __future__ import annotations

import pptx
import pytest
from fpdf import FPDF
from PIL import Image

from knowledge.chunking import chunk_sections
from knowledge.parsing import ParseError, Section, parse_file
from tests.knowledge.formats import (
    SCAN_LINES,
    ocr_missing,
    scanned_page,
    write_docx_with_headings,
    write_pdf_with_table,
    write_pptx,
    write_scanned_pdf,
    write_xlsx,
)

needs_ocr = pytest.mark.skipif(bool(ocr_missing()), reason=ocr_missing() or "OCR available")


def test_xlsx_rows_keep_their_headers_and_sheet(tmp_path):
    parsed = parse_file(write_xlsx(tmp_path / "catalogue.xlsx"))

    assert (parsed.title, parsed.doc_type) == ("Router catalogue", "xlsx")
    assert parsed.sections == [
        Section(
            "Model: SKY-100 | Price (EUR): 49 | Ports: 4 | Released: 2025-03-01\n"
            "Model: SKY-200 | Price (EUR): 89.5 | Ports: 8 | Released: 2026-01-15",
            {"sheet": "Prices", "section": "Prices"},
            rows=(2, 4),
        ),
        Section("仓库: 成都 | 型号: SKY-100 | 数量: 120", {"sheet": "库存", "section": "库存"}, rows=(2,)),
    ]
    report = parsed.report.as_dict()
    assert (report["sheets"], report["rows"]) == (3, 3)
    assert report["warnings"] == ["sheet 'Internal' is hidden and was not read"]


def test_a_csv_without_question_and_answer_columns_is_a_table(tmp_path):
    path = tmp_path / "stock.csv"
    path.write_text("Model,Warehouse,Count\nSKY-100,Chengdu,120\n,,\nSKY-200,,7\n", encoding="utf-8")

    parsed = parse_file(path)

    assert parsed.doc_type == "csv"
    assert parsed.sections == [
        Section("Model: SKY-100 | Warehouse: Chengdu | Count: 120\nModel: SKY-200 | Count: 7", {}, rows=(2, 4))
    ]


def test_pptx_slides_with_title_text_table_and_notes(tmp_path):
    parsed = parse_file(write_pptx(tmp_path / "training.pptx"))

    assert (parsed.title, parsed.doc_type) == ("Wiring the SKY-100", "pptx")
    first, second = parsed.sections
    assert first == Section(
        "Wiring the SKY-100\n\nConnect the WAN port to the modem.\n\n"
        "Speaker notes: Remind the audience the WAN port is yellow.",
        {"slide": 1, "slide_title": "Wiring the SKY-100"},
    )
    assert second.metadata == {"slide": 2, "slide_title": "保修政策"}
    assert "| 型号 | 保修 |\n| --- | --- |\n| SKY-100 | 24个月 |" in second.text
    report = parsed.report.as_dict()
    assert (report["slides"], report["tables"]) == (3, 1)
    assert report["warnings"] == ["slide 3 has no text"]


def test_pptx_notes_page_without_its_body_placeholder_is_read_as_no_notes(tmp_path):
    """PowerPoint lets a user delete the notes page's body box; python-pptx then gives no notes frame."""
    presentation = pptx.Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[5])  # title only
    slide.shapes.title.text = "Wiring the SKY-100"
    body = slide.notes_slide.notes_placeholder
    body._element.getparent().remove(body._element)
    path = tmp_path / "no-notes-body.pptx"
    presentation.save(str(path))

    parsed = parse_file(path)

    assert parsed.sections == [Section("Wiring the SKY-100", {"slide": 1, "slide_title": "Wiring the SKY-100"})]


def test_pdf_table_becomes_a_markdown_table_between_the_text_around_it(tmp_path):
    parsed = parse_file(write_pdf_with_table(tmp_path / "prices.pdf"))

    assert parsed.sections == [
        Section("Our router prices for 2026 are listed below.", {"page": 1}),
        Section(
            "| SKY-100 | 49 EUR | 2 |\n| SKY-200 | 58 EUR | 4 |",
            {"page": 1, "table": 1, "caption": "Table 1: Router prices"},
            rows=(2, 3),
            header="Table 1: Router prices\n| Model | Price | Ports |\n| --- | --- | --- |",
        ),
        Section("Prices include VAT.", {"page": 1}),
    ]
    assert (parsed.report.pages, parsed.report.tables, parsed.report.ocr_pages) == (1, 1, 0)


def test_a_long_table_is_chunked_by_whole_rows_each_under_the_caption_and_header(tmp_path):
    parsed = parse_file(write_pdf_with_table(tmp_path / "prices.pdf", rows=30))
    (table,) = [section for section in parsed.sections if section.rows]

    def words(text: str) -> int:
        return len(text.split())

    drafts = chunk_sections([table], count_tokens=words, chunk_size=60, chunk_overlap=10)

    assert len(drafts) > 2
    body_rows = []
    for draft in drafts:
        assert draft.text.startswith(table.header + "\n")
        body = draft.text.removeprefix(table.header + "\n").split("\n")
        assert all(line.startswith("| SKY-") and line.endswith(" |") for line in body)
        first, last = draft.metadata["rows"]
        assert last - first + 1 == len(body)
        body_rows.extend(body)
    assert body_rows == table.text.split("\n")  # every row once, none cut, none repeated


def test_docx_heading_paths_and_captioned_table(tmp_path):
    parsed = parse_file(write_docx_with_headings(tmp_path / "manual.docx"))

    assert parsed.title == "Router Manual"
    assert parsed.sections == [
        Section("Unpack the unit.", {"section": "Installation"}),
        Section("Connect the yellow WAN port.", {"section": "Installation > Wiring"}),
        Section(
            "| WAN | yellow |\n| LAN | blue |",
            {"section": "Installation > Wiring", "table": 1, "caption": "Table 2: Cable colours"},
            rows=(2, 3),
            header="Table 2: Cable colours\n| Port | Colour |\n| --- | --- |",
        ),
        Section("Two years from purchase.", {"section": "Warranty"}),
    ]


@needs_ocr
def test_a_scanned_pdf_page_is_read_by_ocr(tmp_path):
    parsed = parse_file(write_scanned_pdf(tmp_path / "service.pdf", tmp_path / "scan.png"))

    typed, scanned = parsed.sections
    assert typed == Section("Service manual, scanned appendix follows.", {"page": 1})
    assert scanned.metadata == {"page": 2, "ocr": True}
    assert "SKY-100" in scanned.text
    assert "保修期为二十四个月" in scanned.text  # Tesseract's spaces between CJK characters are gone
    report = parsed.report.as_dict()
    assert (report["pages"], report["ocr_pages"], report["ocr_engine"]) == (2, 1, "tesseract")


@needs_ocr
@pytest.mark.parametrize("suffix", [".png", ".jpg"])
def test_an_image_is_read_by_ocr(tmp_path, suffix):
    path = tmp_path / f"notice{suffix}"
    scanned_page(SCAN_LINES).save(path)

    parsed = parse_file(path)

    assert parsed.doc_type == "image"
    (section,) = parsed.sections
    assert "Reset the SKY-100" in section.text
    assert "二十四个月" in section.text
    assert (parsed.report.pages, parsed.report.ocr_pages) == (1, 1)


def test_a_scanned_page_without_ocr_is_a_warning_and_an_image_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr("engines.ocr.shutil.which", lambda name: None)
    path = tmp_path / "blank.png"
    Image.new("RGB", (200, 100), "white").save(path)
    with pytest.raises(ParseError, match="could not read the image's text by OCR: tesseract is not installed"):
        parse_file(path)

    pdf_path = tmp_path / "scan.pdf"
    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    pdf.add_page()
    pdf.cell(text="Typed page.")
    pdf.add_page()
    pdf.image(str(path), x=0, y=0, w=100)
    pdf.output(str(pdf_path))
    parsed = parse_file(pdf_path)
    assert [section.metadata["page"] for section in parsed.sections] == [1]
    assert parsed.report.warnings == [
        (
            "page 2 has no text layer and OCR could not read it: tesseract is not installed "
            "(Debian: apt-get install tesseract-ocr tesseract-ocr-chi-sim)"
        )
    ]


@pytest.mark.parametrize(
    ("name", "content", "phrase"),
    [
        ("sheet.xlsx", b"not a spreadsheet", "could not read XLSX: the file is not a .xlsx (zip) package"),
        ("deck.pptx", b"not slides", "could not read PPTX: the file is not a .pptx (zip) package"),
        ("photo.png", b"not an image at all", "could not read image: "),
        ("photo.jpeg", b"\xff\xd8\xff\xe0 truncated", "could not read image: "),
    ],
)
def test_an_unreadable_file_says_why(tmp_path, name, content, phrase):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ParseError) as info:
        parse_file(path)
    assert phrase in str(info.value)


def test_a_damaged_zip_package_says_why(tmp_path):
    path = write_xlsx(tmp_path / "catalogue.xlsx")
    path.write_bytes(path.read_bytes()[:600])
    with pytest.raises(ParseError, match="could not read XLSX"):
        parse_file(path)


@pytest.mark.parametrize(
    "write",
    [
        lambda tmp: write_xlsx(tmp / "catalogue.xlsx"),
        lambda tmp: write_pptx(tmp / "training.pptx"),
        lambda tmp: write_pdf_with_table(tmp / "prices.pdf", rows=30),
        lambda tmp: write_docx_with_headings(tmp / "manual.docx"),
    ],
    ids=["xlsx", "pptx", "pdf", "docx"],
)
def test_every_chunk_locates_itself_in_the_extracted_text(tmp_path, write):
    parsed = parse_file(write(tmp_path))
    drafts = chunk_sections(
        parsed.sections, count_tokens=lambda text: len(text.split()), chunk_size=40, chunk_overlap=8
    )

    assert len(drafts) >= len(parsed.sections)
    for draft in drafts:
        locator = draft.metadata["locator"]
        start, end = locator["chars"]
        located = parsed.text[start:end]
        rows = draft.metadata.get("rows")
        if rows is None:
            assert located == draft.text
        else:  # a table's chunk: its header (if any), then exactly the rows the offsets cover
            section = next(
                section
                for section in parsed.sections
                if section.offset <= start < section.offset + len(section.text) + 1
            )
            assert draft.text == (f"{section.header}\n{located}" if section.header else located)
            assert locator["rows"] == rows
        for key in ("section", "sheet", "slide", "table"):
            assert locator.get(key) == draft.metadata.get(key)
        if "page" in draft.metadata:
            assert locator["pages"] == [draft.metadata["page"]] * 2
