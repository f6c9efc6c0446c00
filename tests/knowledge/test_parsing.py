"""Tests for knowledge.parsing; every fixture file is built in tmp_path with the real libraries."""

from __future__ import annotations

import json
from pathlib import Path

import docx
import pytest
from fpdf import FPDF

from knowledge.parsing import (
    SUPPORTED_SUFFIXES,
    ParsedDocument,
    ParseError,
    Section,
    clean_text,
    doc_type_for,
    parse_file,
)

CHINESE = "今天推荐的菜是鱼香肉丝，味道很好。我们还有宫保鸡丁和麻婆豆腐，欢迎大家来品尝！"


def write_pdf(path: Path, title: str | None = "Sky Product Manual", user_password: str | None = None) -> Path:
    pdf = FPDF()
    if title is not None:
        pdf.set_title(title)
    if user_password is not None:
        pdf.set_encryption(owner_password="owner-secret", user_password=user_password)
    pdf.set_font("Helvetica", size=12)
    pdf.add_page()
    pdf.cell(text="Product code SKY-10023908 ships with a charger.")
    pdf.add_page()
    pdf.cell(text="Warranty lasts 24 months from purchase.")
    pdf.output(str(path))
    return path


def write_docx(path: Path, core_title: str = "") -> Path:
    document = docx.Document()
    document.core_properties.title = core_title
    document.add_heading("Installation Guide", level=1)
    document.add_paragraph("Unpack the SKY-10023908 unit carefully.")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text = "Part"
    table.cell(0, 1).text = "Quantity"
    table.cell(1, 0).text = "Screw M4"
    table.cell(1, 1).text = "8"
    document.add_paragraph("Then connect the power cable.")
    document.save(str(path))
    return path


# --- clean_text ---------------------------------------------------------------------------


def test_clean_text_folds_full_width_forms():
    assert clean_text("ＳＫＹ－１００") == "SKY-100"
    assert clean_text("ＡＢＣ１２３\u3000ok") == "ABC123 ok"


def test_clean_text_cjk_punctuation_after_nfkc():
    # The chunker splits sentences on these, so pin what NFKC does to them.
    assert clean_text("好。好！好？好；好，") == "好。好!好?好;好,"
    assert clean_text("鱼香肉丝") == "鱼香肉丝"


def test_clean_text_whitespace_and_control_characters():
    raw = "  line one \t\t end   \r\nline\x00 two\x07\r\r\r\r\n\n\nthree\u200b\t \n"
    assert clean_text(raw) == "line one end\nline two\n\nthree"


# --- formats ------------------------------------------------------------------------------


def test_supported_suffixes_and_doc_types():
    assert {
        ".txt", ".md", ".markdown", ".html", ".htm", ".pdf", ".docx", ".csv", ".jsonl",
        ".xlsx", ".pptx", ".png", ".jpg", ".jpeg",
    } == SUPPORTED_SUFFIXES  # fmt: skip
    assert doc_type_for(Path("a.CSV")) == "faq"
    assert doc_type_for(Path("a.jsonl")) == "faq"
    assert doc_type_for(Path("a.htm")) == "html"
    assert doc_type_for(Path("a.markdown")) == "md"


def test_txt_utf8_with_bom(tmp_path):
    path = tmp_path / "menu.txt"
    path.write_bytes(("\ufeff" + CHINESE + "\r\n\r\n\r\n产品编号 SKY-10023908\r\n").encode("utf-8"))

    parsed = parse_file(path)

    text = f"{clean_text(CHINESE)}\n\n产品编号 SKY-10023908"
    assert parsed == ParsedDocument(title="menu", doc_type="txt", sections=[Section(text, {})], text=text)


def test_txt_gbk_is_detected(tmp_path):
    path = tmp_path / "gbk.txt"
    path.write_bytes((CHINESE + "\n" + CHINESE).encode("gbk"))

    (section,) = parse_file(path).sections

    assert "鱼香肉丝" in section.text
    assert "麻婆豆腐" in section.text


def test_html_drops_noise_and_keeps_blocks(tmp_path):
    path = tmp_path / "page.html"
    path.write_text(
        """<!DOCTYPE html>
        <html><head><title>Sky Support</title><style>.x { color: red }</style></head>
        <body>
          <nav>Home | Products</nav>
          <h1>Welcome</h1>
          <p>Product   code
             SKY-10023908<br>is in stock.</p>
          <script>var secret = "tracking";</script>
          <ul><li>鱼香肉丝</li>
              <li>宫保鸡丁</li></ul>
          <table><tr><th>Size</th><th>Price</th></tr><tr><td>L</td><td>30</td></tr></table>
          <footer>Copyright</footer>
        </body></html>""",
        encoding="utf-8",
    )

    parsed = parse_file(path)

    assert parsed.title == "Sky Support"
    assert parsed.doc_type == "html"
    (section,) = parsed.sections
    assert section.text == (
        "Welcome\n\nProduct code SKY-10023908\nis in stock.\n\n鱼香肉丝\n宫保鸡丁\n\nSize | Price\nL | 30"
    )
    for noise in ("tracking", "color", "Home", "Copyright", "Sky Support"):
        assert noise not in section.text


def test_html_title_falls_back_to_h1_then_stem(tmp_path):
    with_h1 = tmp_path / "a.htm"
    with_h1.write_text("<body><h1> Main  Heading </h1><p>text</p></body>", encoding="utf-8")
    bare = tmp_path / "b.html"
    bare.write_text("<p>just text</p>", encoding="utf-8")

    assert parse_file(with_h1).title == "Main Heading"
    assert parse_file(bare).title == "b"


def test_markdown_renders_to_text(tmp_path):
    path = tmp_path / "guide.md"
    path.write_text(
        "Intro line before the title.\n\n# Sky *Guide*\n\nOrder **SKY-10023908** today.\n"
        "Same paragraph.\n\n- 鱼香肉丝\n- 宫保鸡丁\n\n<script>alert(1)</script>\n",
        encoding="utf-8",
    )

    parsed = parse_file(path)

    assert parsed.title == "Sky Guide"
    assert parsed.doc_type == "md"
    assert [section.text for section in parsed.sections] == [
        "Intro line before the title.",
        "Sky Guide\n\nOrder SKY-10023908 today. Same paragraph.\n\n鱼香肉丝\n宫保鸡丁",
    ]
    assert [section.metadata for section in parsed.sections] == [{}, {}]  # the title leads no heading path


def heading_paths(path: Path, text: str) -> list[tuple[str | None, str]]:
    path.write_text(text, encoding="utf-8")
    return [(section.metadata.get("section"), section.text) for section in parse_file(path).sections]


def test_markdown_and_html_are_cut_at_headings_with_their_paths(tmp_path):
    markdown = (
        "# Kettle\n\nIntro.\n\n## Setup\n\n### Wi-Fi\n\nHold the button.\n\n### Power\n\nPlug it in.\n\n"
        "## Cleaning\n\nDescale monthly.\n\n# Appendix\n\n## Specs\n\n1.7 litres.\n"
    )
    assert heading_paths(tmp_path / "guide.md", markdown) == [
        (None, "Kettle\n\nIntro."),
        ("Setup > Wi-Fi", "Wi-Fi\n\nHold the button."),  # "Setup" alone has no text: no section of its own
        ("Setup > Power", "Power\n\nPlug it in."),
        ("Cleaning", "Cleaning\n\nDescale monthly."),
        ("Appendix > Specs", "Specs\n\n1.7 litres."),  # a second h1 is a heading like any other
    ]
    html = (
        "<html><head><title>Support</title></head><body><header><h2>Site menu</h2></header><p>Welcome.</p>"
        "<h3>Returns  policy</h3><p>Thirty days.</p><div><h4>Refunds</h4><p>To the card.</p></div></body></html>"
    )
    assert heading_paths(tmp_path / "page.html", html) == [
        (None, "Welcome."),
        ("Returns policy", "Returns policy\n\nThirty days."),
        ("Returns policy > Refunds", "Refunds\n\nTo the card."),
    ]


def test_markdown_without_h1_uses_stem(tmp_path):
    path = tmp_path / "notes.markdown"
    path.write_text("## Only a subheading\n\nbody", encoding="utf-8")

    assert parse_file(path).title == "notes"


def test_pdf_one_section_per_page(tmp_path):
    parsed = parse_file(write_pdf(tmp_path / "manual.pdf"))

    assert parsed.title == "Sky Product Manual"
    assert parsed.doc_type == "pdf"
    assert [section.metadata for section in parsed.sections] == [{"page": 1}, {"page": 2}]
    assert "SKY-10023908" in parsed.sections[0].text
    assert "Warranty lasts 24 months" in parsed.sections[1].text


def test_pdf_without_title_uses_stem(tmp_path):
    assert parse_file(write_pdf(tmp_path / "untitled.pdf", title=None)).title == "untitled"


def test_pdf_with_owner_password_only_opens(tmp_path):
    parsed = parse_file(write_pdf(tmp_path / "locked.pdf", user_password=""))

    assert "SKY-10023908" in parsed.sections[0].text


def test_docx_keeps_document_order_with_its_table_in_markdown(tmp_path):
    parsed = parse_file(write_docx(tmp_path / "install.docx"))

    assert parsed.title == "Installation Guide"
    assert parsed.doc_type == "docx"
    assert parsed.sections == [
        Section("Unpack the SKY-10023908 unit carefully.", {}),
        Section("| Screw M4 | 8 |", {"table": 1}, rows=(2,), header="| Part | Quantity |\n| --- | --- |"),
        Section("Then connect the power cable.", {}),
    ]
    assert parsed.report.tables == 1


def test_docx_title_prefers_core_properties(tmp_path):
    assert parse_file(write_docx(tmp_path / "x.docx", core_title="Official Title")).title == "Official Title"


def test_csv_faq_with_chinese_headers_and_bom(tmp_path):
    path = tmp_path / "faq.csv"
    path.write_text(
        "问题,答案,category\n"
        '有什么推荐菜?,"鱼香肉丝, 很好吃",菜单\n'
        ",,\n"
        "How do I reset SKY-10023908?,Hold the power button for 10 seconds.,device\n",
        encoding="utf-8-sig",
    )

    parsed = parse_file(path)

    assert parsed.title == "faq"
    assert parsed.doc_type == "faq"
    assert parsed.sections == [
        Section(
            "有什么推荐菜?\n鱼香肉丝, 很好吃",
            {"question": "有什么推荐菜?", "row": 1, "category": "菜单"},
        ),
        Section(
            "How do I reset SKY-10023908?\nHold the power button for 10 seconds.",
            {"question": "How do I reset SKY-10023908?", "row": 3, "category": "device"},
        ),
    ]


def test_csv_faq_accepts_english_aliases(tmp_path):
    path = tmp_path / "faq.csv"
    path.write_text(" Q ,A\nWhat is SKY?,A product line.\n", encoding="utf-8")

    (section,) = parse_file(path).sections

    assert section.metadata == {"question": "What is SKY?", "row": 1}


def test_jsonl_faq(tmp_path):
    path = tmp_path / "faq.jsonl"
    lines = [
        json.dumps({"question": "Where is SKY-10023908 made?", "answer": "In Shenzhen.", "priority": 2}),
        "",
        json.dumps({"问": "推荐什么菜？", "回答": "鱼香肉丝。", "tags": ["x"]}, ensure_ascii=False),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    parsed = parse_file(path)

    assert parsed.doc_type == "faq"
    assert parsed.title == "faq"
    assert [section.text for section in parsed.sections] == [
        "Where is SKY-10023908 made?\nIn Shenzhen.",
        "推荐什么菜?\n鱼香肉丝。",
    ]
    assert parsed.sections[0].metadata == {"question": "Where is SKY-10023908 made?", "line": 1, "priority": 2}
    assert parsed.sections[1].metadata == {"question": "推荐什么菜?", "line": 3}


# --- failures -----------------------------------------------------------------------------


def assert_parse_error(path: Path, phrase: str) -> str:
    with pytest.raises(ParseError) as info:
        parse_file(path)
    message = str(info.value)
    assert phrase in message
    return message


@pytest.mark.parametrize(
    ("name", "content", "phrase"),
    [
        ("broken.pdf", b"%PDF-1.4\nthis is not really a pdf\n", "could not read PDF: "),
        ("fake.docx", b"plain text pretending to be a Word file", "could not read DOCX: the file is not a .docx (zip)"),
        ("faq.jsonl", b'["q", "a"]\n', "line 1 is not a JSON object"),
        ("faq.csv", b"title,body\n,\n", "no text found (the table has no data rows)"),
        ("faq.csv", b"question,answer\nfine?,yes\nhalf?,\n", "FAQ row 2 has no answer"),
        ("faq.jsonl", b'{"answer": "orphan"}\n', "FAQ line 1 has no question"),
        ("empty.txt", b"", "no text found"),
        ("empty.pdf", b"", "no text found"),
        ("empty.csv", b"", "no text found"),
        ("blank.md", b"\n  \n", "no text found"),
        ("scripts.html", b"<html><head><title>T</title></head><body><script>x()</script></body>", "no text found"),
        ("data.xyz", b"content", "unsupported file type .xyz"),
    ],
)
def test_a_file_that_cannot_be_used_says_why(tmp_path, name, content, phrase):
    path = tmp_path / name
    path.write_bytes(content)
    assert_parse_error(path, phrase)


def test_a_name_without_a_suffix_is_unsupported():
    with pytest.raises(ParseError, match="unsupported file type"):
        doc_type_for(Path("README"))


def test_truncated_pdf(tmp_path):
    path = write_pdf(tmp_path / "cut.pdf")
    path.write_bytes(path.read_bytes()[:400])

    assert_parse_error(path, "could not read PDF")


def test_encrypted_pdf(tmp_path):
    assert_parse_error(write_pdf(tmp_path / "secret.pdf", user_password="s3cret"), "PDF is encrypted")


def test_invalid_json_line(tmp_path):
    path = tmp_path / "faq.jsonl"
    path.write_text('{"q": "ok?", "a": "yes"}\n{"q": "broken", \n', encoding="utf-8")

    message = assert_parse_error(path, "line 2 is not valid JSON: ")
    assert "Expecting" in message


def test_missing_file(tmp_path):
    assert_parse_error(tmp_path / "gone.txt", "could not read file")
