"""Turn one uploaded file into cleaned text sections for the chunker.

Every failure surfaces as :class:`ParseError` whose message is stored as the document's
error and shown to admins, so library exceptions are wrapped into short readable messages.
"""

from __future__ import annotations

import csv
import io
import json
import re
import unicodedata
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import charset_normalizer
import docx
import pypdf
from bs4 import BeautifulSoup
from bs4.element import PreformattedString
from docx.document import Document as DocxDocument
from docx.table import Table, _Cell
from docx.text.paragraph import Paragraph
from markdown_it import MarkdownIt
from pypdf.errors import DependencyError


class ParseError(Exception):
    """A file that cannot be turned into text; the message is shown to admins as the document's error."""


@dataclass(frozen=True)
class Section:
    """A run of text the chunker splits on its own: a page, an FAQ pair, the text under a heading;
    sections are never merged. ``metadata["section"]``: the heading path to it ("Setup > Wi-Fi")."""

    text: str
    metadata: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ParsedDocument:
    """A parsed file; ``title`` falls back to the file stem when the file names none."""

    title: str
    doc_type: str
    sections: list[Section]


# --- text cleanup -------------------------------------------------------------------------

# Every line break str.splitlines() knows, so one "\n" convention reaches the chunker.
_LINE_BREAKS = re.compile(r"\r\n|[\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
# Remaining C0/C1 controls (not \t or \n) plus zero-width space and stray BOMs: invisible noise.
_INVISIBLE = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f\u200b\ufeff]")
_BLANKS = re.compile(r"[ \t]+")
_TRAILING_SPACE = re.compile(r" +\n")
_EXTRA_NEWLINES = re.compile(r"\n{3,}")


def clean_text(text: str) -> str:
    """Normalize text so identical content gives identical chunks, embeddings and keyword matches.

    NFKC folds full-width forms ("ＳＫＹ－１００" -> "SKY-100", ideographic space -> " ").
    Chinese characters are untouched, but NFKC also maps some CJK punctuation to ASCII:
    "，" -> ",", "！" -> "!", "？" -> "?", "；" -> ";", "：" -> ":", "（）" -> "()",
    "～" -> "~", "…" -> "...", while "。" and "、" stay as they are. Sentence splitting must
    therefore treat "。" plus ASCII "!", "?", ";" as Chinese sentence ends. NFKC also folds
    compatibility characters such as "①" -> "1", "²" -> "2" and "ﬁ" -> "fi".

    Then: all line breaks become "\\n", control characters other than "\\n"/"\\t" (and zero-width
    spaces/BOMs) are dropped, runs of spaces/tabs become one space, trailing line spaces go,
    3+ newlines become a blank line, and the result is stripped.
    """
    text = unicodedata.normalize("NFKC", text)
    text = _LINE_BREAKS.sub("\n", text)
    text = _INVISIBLE.sub("", text)
    text = _BLANKS.sub(" ", text)
    text = _TRAILING_SPACE.sub("\n", text)
    text = _EXTRA_NEWLINES.sub("\n\n", text)
    return text.strip()


def _one_line(text: str) -> str:
    return " ".join(clean_text(text).split())


def _describe(exc: Exception) -> str:
    """Some library exceptions have an empty message (or a quoted one, for KeyError); keep it readable."""
    message = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return message.strip() or type(exc).__name__


def _decode(raw: bytes) -> str:
    """UTF-8 (BOM stripped) covers nearly all uploads; legacy encodings such as GBK are detected."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    match = charset_normalizer.from_bytes(raw).best()
    if match is None:
        raise ParseError("could not detect the text encoding (is this really a text file?)")
    return str(match)


# --- HTML / Markdown ----------------------------------------------------------------------

_DROPPED_TAGS = ["head", "script", "style", "noscript", "nav", "header", "footer", "template"]
_PARAGRAPH_TAGS = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote", "table"}
_LINE_TAGS = {"div", "li", "tr", "section", "article", "ul", "ol", "dl", "dt", "dd"}
_CELL_TAGS = ["td", "th"]


def _html_title(soup: BeautifulSoup) -> str:
    for tag in (soup.title, soup.find("h1")):
        if tag is not None and (title := _one_line(tag.get_text(" "))):
            return title
    return ""


_PARAGRAPH_BREAK = "\n\u2029\n"  # a U+2029 in the source (outside <pre>) is folded to a space first


def _html_text(soup: BeautifulSoup) -> str:
    """Text with block elements on their own lines and paragraphs separated by blank lines.

    Source whitespace is collapsed first (except inside <pre>) so that only the markers
    inserted here decide where lines break; whitespace-only lines between blocks are then
    dropped and paragraph markers become blank lines. Mutates ``soup``; take the title
    beforehand. The <head> is dropped too: its <title> is reported as the document title.
    """
    for tag in soup.find_all(_DROPPED_TAGS):
        tag.decompose()
    for string in soup.find_all(string=True):
        if isinstance(string, PreformattedString):  # comments, doctype, processing instructions
            string.extract()
        elif string.find_parent("pre") is None:
            string.replace_with(re.sub(r"\s+", " ", string))
    for tag in soup.find_all(True):
        if tag.name == "br":
            tag.replace_with("\n")
        elif tag.name in _PARAGRAPH_TAGS:
            tag.insert_before(_PARAGRAPH_BREAK)
            tag.insert_after(_PARAGRAPH_BREAK)
        elif tag.name in _LINE_TAGS:
            tag.insert_before("\n")
            tag.insert_after("\n")
        elif tag.name in _CELL_TAGS and tag.find_next_sibling(_CELL_TAGS) is not None:
            tag.insert_after(" | ")
    lines = (line.strip(" \t") for line in soup.get_text().split("\n"))
    return clean_text("\n".join(line for line in lines if line).replace("\u2029", ""))


_HEADING_TAGS = ["h1", "h2", "h3", "h4", "h5", "h6"]
# Where the n-th heading starts its section: private-use characters, which no cleanup step touches.
_SECTION_MARK = re.compile("\n*\ue000(\\d+)\ue001\n*")


def _parse_html_markup(markup: str) -> tuple[str, list[Section]]:
    """One section per heading (and one for any text before the first), each with its heading path."""
    soup = BeautifulSoup(markup, "lxml")
    title = _html_title(soup)
    headings = []
    for number, tag in enumerate(soup.find_all(_HEADING_TAGS)):
        headings.append((int(tag.name[1]), _one_line(tag.get_text(" "))))
        tag.insert_before(f"\ue000{number}\ue001")  # dropped with the heading when it sits in a <nav>
    return title, _sections_by_heading(_html_text(soup), headings, title)


def _sections_by_heading(text: str, headings: list[tuple[int, str]], title: str) -> list[Section]:
    """``text`` cut at its heading marks. A section's path is the headings above it, each the last one
    of a higher level, and its own; the title leads no path (every chunk is read with it already). A
    heading with no text of its own before the next one is no section: it lives on in the paths."""
    pieces = _SECTION_MARK.split(text)
    sections = [Section(pieces[0].strip())] if pieces[0].strip() else []
    path: list[tuple[int, str]] = []
    for number, body in zip(pieces[1::2], pieces[2::2]):
        level, heading = headings[int(number)]
        path = [(above, name) for above, name in path if above < level] + [(level, heading)]
        body = body.strip()
        if not body or body == heading:
            continue
        names = [name for _, name in path if name]
        if names and names[0] == title:
            names = names[1:]
        sections.append(Section(body, {"section": " > ".join(names)} if names else {}))
    return sections


def _parse_html(raw: bytes) -> tuple[str, list[Section]]:
    return _parse_html_markup(_decode(raw))


_MARKDOWN = MarkdownIt("commonmark").enable(["table", "strikethrough"])


def _parse_markdown(raw: bytes) -> tuple[str, list[Section]]:
    """Rendering to HTML first reuses the HTML text rules and drops Markdown syntax reliably."""
    return _parse_html_markup(_MARKDOWN.render(_decode(raw)))


# --- plain text, PDF, DOCX ----------------------------------------------------------------


def _parse_txt(raw: bytes) -> tuple[str, list[Section]]:
    return "", [Section(clean_text(_decode(raw)))]


def _parse_pdf(raw: bytes) -> tuple[str, list[Section]]:
    try:
        reader = pypdf.PdfReader(io.BytesIO(raw))
        if reader.is_encrypted and reader.decrypt("") == pypdf.PasswordType.NOT_DECRYPTED:
            raise ParseError("PDF is encrypted")
        title = _one_line(str(reader.metadata.title or "")) if reader.metadata else ""
        sections = [
            Section(text, {"page": number})
            for number, page in enumerate(reader.pages, start=1)
            if (text := clean_text(page.extract_text() or ""))
        ]
    except ParseError:
        raise
    except DependencyError as exc:  # e.g. AES encryption without the optional "cryptography" package
        raise ParseError(f"PDF is encrypted ({_describe(exc)})") from exc
    except Exception as exc:  # pypdf raises many types (PdfReadError, ValueError, KeyError...) on bad files
        raise ParseError(f"could not read PDF: {_describe(exc)}") from exc
    return title, sections


def _docx_cell_text(cell: _Cell) -> str:
    return " ".join(" ".join(_docx_blocks(cell)).split())


def _docx_blocks(container: DocxDocument | _Cell) -> list[str]:
    """Paragraph texts and table rows in document order; a table row becomes one "a | b" line."""
    blocks: list[str] = []
    for item in container.iter_inner_content():
        if isinstance(item, Paragraph):
            blocks.append(item.text)
        elif isinstance(item, Table):
            rows = []
            for row in item.rows:
                # Merged cells are returned once per grid column they span; keep each cell once.
                cells = list({id(cell._tc): cell for cell in row.cells}.values())
                rows.append(" | ".join(_docx_cell_text(cell) for cell in cells))
            blocks.append("\n".join(rows))
    return blocks


def _docx_title(document: DocxDocument) -> str:
    if title := _one_line(document.core_properties.title or ""):
        return title
    for paragraph in document.paragraphs:
        style = paragraph.style.name if paragraph.style is not None else ""
        if (style == "Title" or style.startswith("Heading")) and (title := _one_line(paragraph.text)):
            return title
    return ""


def _parse_docx(raw: bytes) -> tuple[str, list[Section]]:
    if not zipfile.is_zipfile(io.BytesIO(raw)):
        raise ParseError("could not read DOCX: the file is not a .docx (zip) package")
    try:
        document = docx.Document(io.BytesIO(raw))
        title = _docx_title(document)
        text = clean_text("\n\n".join(_docx_blocks(document)))
    except Exception as exc:  # python-docx/lxml/zipfile raise assorted types on damaged packages
        raise ParseError(f"could not read DOCX: {_describe(exc)}") from exc
    return title, [Section(text)]


# --- FAQ (CSV / JSONL) --------------------------------------------------------------------

_QUESTION_KEYS = {"question", "q", "问题", "问"}
_ANSWER_KEYS = {"answer", "a", "答案", "答", "回答"}


def _match_key(keys: list[str], aliases: set[str]) -> str | None:
    return next((key for key in keys if clean_text(key).casefold() in aliases), None)


def _faq_section(question: str, answer: str, where: str, metadata: dict) -> Section | None:
    """One question/answer section; None for a blank entry, ParseError for a half-filled one."""
    question, answer = clean_text(question), clean_text(answer)
    if not question and not answer:
        return None
    if not answer:
        raise ParseError(f"FAQ {where} has no answer")
    if not question:
        raise ParseError(f"FAQ {where} has no question")
    return Section(f"{question}\n{answer}", {**metadata, "question": question})


def _parse_csv(raw: bytes) -> tuple[str, list[Section]]:
    try:
        rows = list(csv.reader(io.StringIO(_decode(raw), newline="")))
    except csv.Error as exc:
        raise ParseError(f"could not read CSV: {_describe(exc)}") from exc
    if not rows:
        return "", []
    header = [name.strip() for name in rows[0]]
    question_col = _match_key(header, _QUESTION_KEYS)
    answer_col = _match_key(header, _ANSWER_KEYS)
    if question_col is None or answer_col is None:
        found = ", ".join(name for name in header if name) or "none"
        raise ParseError(f"FAQ needs a question column and an answer column; found columns: {found}")
    sections = []
    for number, row in enumerate(rows[1:], start=1):
        values = dict(zip(header, (cell.strip() for cell in row)))
        extra = {name: value for name, value in values.items() if name and name not in (question_col, answer_col)}
        section = _faq_section(
            values.get(question_col, ""), values.get(answer_col, ""), f"row {number}", {**extra, "row": number}
        )
        if section is not None:
            sections.append(section)
    return "", sections


def _json_scalar(value: object) -> bool:
    return isinstance(value, (str, int, float, bool))


def _parse_jsonl(raw: bytes) -> tuple[str, list[Section]]:
    sections = []
    # Not splitlines(): JSON strings may hold raw U+2028/U+2029, which it would treat as breaks.
    for number, line in enumerate(_decode(raw).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ParseError(f"line {number} is not valid JSON: {exc.msg} (column {exc.colno})") from exc
        if not isinstance(entry, dict):
            raise ParseError(f"line {number} is not a JSON object")
        question_key = _match_key(list(entry), _QUESTION_KEYS)
        answer_key = _match_key(list(entry), _ANSWER_KEYS)
        if question_key is None and answer_key is None:
            found = ", ".join(entry) or "none"
            raise ParseError(f"FAQ line {number} needs a question key and an answer key; found keys: {found}")
        question, answer = entry.get(question_key), entry.get(answer_key)
        for role, value in (("question", question), ("answer", answer)):
            if value is not None and not _json_scalar(value):
                raise ParseError(f"FAQ line {number}: the {role} must be text")
        extra = {
            key: value for key, value in entry.items() if key not in (question_key, answer_key) and _json_scalar(value)
        }
        section = _faq_section(
            "" if question is None else str(question),
            "" if answer is None else str(answer),
            f"line {number}",
            {**extra, "line": number},
        )
        if section is not None:
            sections.append(section)
    return "", sections


# --- public entry points ------------------------------------------------------------------

# Parsers return (title or "" for "use the file stem", sections).
_Parser = Callable[[bytes], tuple[str, list[Section]]]
_FORMATS: dict[str, tuple[str, _Parser]] = {
    ".txt": ("txt", _parse_txt),
    ".md": ("md", _parse_markdown),
    ".markdown": ("md", _parse_markdown),
    ".html": ("html", _parse_html),
    ".htm": ("html", _parse_html),
    ".pdf": ("pdf", _parse_pdf),
    ".docx": ("docx", _parse_docx),
    ".csv": ("faq", _parse_csv),
    ".jsonl": ("faq", _parse_jsonl),
}

SUPPORTED_SUFFIXES: frozenset[str] = frozenset(_FORMATS)


def _format_for(path: Path) -> tuple[str, _Parser]:
    suffix = path.suffix.lower()
    if suffix not in _FORMATS:
        raise ParseError(f"unsupported file type {suffix or '(no extension)'}")
    return _FORMATS[suffix]


def doc_type_for(path: Path) -> str:
    """The document type stored on Document/Chunk rows; csv and jsonl are both "faq"."""
    return _format_for(path)[0]


def parse_file(path: Path) -> ParsedDocument:
    """Parse ``path`` by its suffix; any failure, including an unexpected library error, is a ParseError."""
    doc_type, parser = _format_for(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ParseError(f"could not read file: {exc.strerror or _describe(exc)}") from exc
    if not raw.strip():
        raise ParseError("no text found")
    try:
        title, sections = parser(raw)
    except ParseError:
        raise
    except Exception as exc:  # last resort: the message must reach the admin, not crash ingestion
        raise ParseError(f"could not parse {doc_type} file: {_describe(exc)}") from exc
    sections = [section for section in sections if section.text]
    if not sections:
        raise ParseError("no text found")
    return ParsedDocument(title=title or path.stem, doc_type=doc_type, sections=sections)
