"""What every parser shares: the section and report types, the error, and text cleanup."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

import charset_normalizer


class ParseError(Exception):
    """A file that cannot be turned into text; the message is shown to admins as the document's error."""


@dataclass(frozen=True)
class Section:
    """A run of text the chunker splits on its own: a page, an FAQ pair, the text under a heading;
    sections are never merged. ``metadata["section"]``: the heading path to it ("Setup > Wi-Fi")."""

    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    # ``rows``: when set, each line of ``text`` is one record (a table or sheet row) and this is its row
    # number; a chunk then takes whole lines only, each chunk led by ``header`` (a Markdown table's
    # header and rule), so no row is cut or loses its columns.
    rows: tuple[int, ...] = ()
    header: str = ""
    # Where ``text`` starts in the document's extracted text (``ParsedDocument.text``); set by parse_file.
    offset: int = field(default=0, compare=False)


@dataclass(frozen=True)
class ParsedDocument:
    """A parsed file; ``title`` falls back to the file stem when the file names none."""

    title: str
    doc_type: str
    sections: list[Section]
    report: ParseReport = field(default_factory=lambda: ParseReport())
    # The sections' texts (a table's header before its rows) joined by blank lines: what a citation's
    # character offsets point into (GET /api/v1/documents/{id}/text).
    text: str = ""


@dataclass
class ParseReport:
    """What reading a file found, shown to curators beside the document: how much was read, how, and what
    was not (a page that could not be read, a sheet with no rows). ``doc_type`` is the parser's own type
    when the suffix alone does not say it (a CSV with no question/answer columns is a table, not an FAQ)."""

    pages: int = 0
    slides: int = 0
    sheets: int = 0
    rows: int = 0
    tables: int = 0
    ocr_pages: int = 0
    ocr_engine: str = ""
    warnings: list[str] = field(default_factory=list)
    doc_type: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "pages": self.pages,
            "slides": self.slides,
            "sheets": self.sheets,
            "rows": self.rows,
            "tables": self.tables,
            "ocr_pages": self.ocr_pages,
            "ocr_engine": self.ocr_engine,
            "warnings": list(self.warnings),
        }


_COUNTED = [("pages", "page"), ("slides", "slide"), ("sheets", "sheet"), ("rows", "row"), ("tables", "table")]


def parse_report_summary(report: dict[str, Any]) -> str:
    """A stored report (``ParseReport.as_dict``) in words, for the console: "2 pages, 1 table, 1 page read
    by OCR (tesseract). Warnings: page 3 ..."; empty before the first parse."""
    counts = [f"{report[key]} {noun}{'' if report[key] == 1 else 's'}" for key, noun in _COUNTED if report.get(key)]
    if ocr_pages := report.get("ocr_pages"):
        engine = f" ({report['ocr_engine']})" if report.get("ocr_engine") else ""
        counts.append(f"{ocr_pages} page{'' if ocr_pages == 1 else 's'} read by OCR{engine}")
    text = ", ".join(counts) + "." if counts else ""
    if warnings := report.get("warnings"):
        text = f"{text} Warnings: {'; '.join(warnings)}.".strip()
    return text


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


def one_line(text: str) -> str:
    return " ".join(clean_text(text).split())


def describe(exc: Exception) -> str:
    """Some library exceptions have an empty message (or a quoted one, for KeyError); keep it readable."""
    message = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return message.strip() or type(exc).__name__


def decode(raw: bytes) -> str:
    """UTF-8 (BOM stripped) covers nearly all uploads; legacy encodings such as GBK are detected."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    match = charset_normalizer.from_bytes(raw).best()
    if match is None:
        raise ParseError("could not detect the text encoding (is this really a text file?)")
    return str(match)
