"""Turn one uploaded file into cleaned text sections for the chunker, with a report of what was read.

Every failure surfaces as :class:`ParseError` whose message is stored as the document's error and shown
to admins, so library exceptions are wrapped into short readable messages. One module per format family:
``markup`` (text, HTML, Markdown), ``records`` (FAQ tables, CSV and XLSX rows), ``office`` (DOCX, PPTX),
``pdf`` (PDF pages and tables, images by OCR).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from knowledge.parsing.base import (
    ParsedDocument,
    ParseError,
    ParseReport,
    Section,
    clean_text,
    describe,
    parse_report_summary,
)
from knowledge.parsing.markup import parse_html, parse_markdown, parse_txt
from knowledge.parsing.office import parse_docx, parse_pptx
from knowledge.parsing.pdf import parse_image, parse_pdf
from knowledge.parsing.records import parse_csv, parse_jsonl, parse_xlsx

__all__ = [
    "SUPPORTED_SUFFIXES",
    "ParseError",
    "ParseReport",
    "ParsedDocument",
    "Section",
    "clean_text",
    "doc_type_for",
    "parse_file",
    "parse_report_summary",
]

# Parsers fill the report and return (title or "" for "use the file stem", sections).
_Parser = Callable[[bytes, ParseReport], tuple[str, list[Section]]]
_FORMATS: dict[str, tuple[str, _Parser]] = {
    ".txt": ("txt", parse_txt),
    ".md": ("md", parse_markdown),
    ".markdown": ("md", parse_markdown),
    ".html": ("html", parse_html),
    ".htm": ("html", parse_html),
    ".pdf": ("pdf", parse_pdf),
    ".docx": ("docx", parse_docx),
    ".pptx": ("pptx", parse_pptx),
    ".xlsx": ("xlsx", parse_xlsx),
    ".csv": ("faq", parse_csv),  # "csv" when it has no question and answer columns (a table)
    ".jsonl": ("faq", parse_jsonl),
    ".png": ("image", parse_image),
    ".jpg": ("image", parse_image),
    ".jpeg": ("image", parse_image),
}

SUPPORTED_SUFFIXES: frozenset[str] = frozenset(_FORMATS)


def _format_for(path: Path) -> tuple[str, _Parser]:
    suffix = path.suffix.lower()
    if suffix not in _FORMATS:
        raise ParseError(f"unsupported file type {suffix or '(no extension)'}")
    return _FORMATS[suffix]


def doc_type_for(path: Path) -> str:
    """The document type stored on a pending Document row; csv and jsonl are both "faq" until parsed
    (a CSV that is a table, not an FAQ, becomes "csv")."""
    return _format_for(path)[0]


def parse_file(path: Path) -> ParsedDocument:
    """Parse ``path`` by its suffix; any failure, including an unexpected library error, is a ParseError."""
    doc_type, parser = _format_for(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ParseError(f"could not read file: {exc.strerror or describe(exc)}") from exc
    if not raw.strip():
        raise ParseError("no text found")
    report = ParseReport()
    try:
        title, sections = parser(raw, report)
    except ParseError:
        raise
    except Exception as exc:  # last resort: the message must reach the admin, not crash ingestion
        raise ParseError(f"could not parse {doc_type} file: {describe(exc)}") from exc
    sections = [section for section in sections if section.text]
    if not sections:
        detail = "; ".join(report.warnings)
        raise ParseError(f"no text found ({detail})" if detail else "no text found")
    sections, text = _placed(sections)
    return ParsedDocument(
        title=title or path.stem, doc_type=report.doc_type or doc_type, sections=sections, report=report, text=text
    )


def _placed(sections: list[Section]) -> tuple[list[Section], str]:
    """The document's extracted text (each section's header, then its text; blank lines between) and
    the sections with the offset of their text in it."""
    parts: list[str] = []
    placed: list[Section] = []
    position = 0
    for section in sections:
        lead = f"{section.header}\n" if section.header else ""
        placed.append(dataclasses.replace(section, offset=position + len(lead)))
        parts.append(lead + section.text)
        position += len(parts[-1]) + 2
    return placed, "\n\n".join(parts)
