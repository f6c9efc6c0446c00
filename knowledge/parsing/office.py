"""Office documents: DOCX cut at its headings (each section with its heading path) with its tables as
Markdown tables, and PPTX read slide by slide (title, text, tables, speaker notes)."""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Iterable, Iterator
from typing import Any

import docx
import pptx
from docx.document import Document as DocxDocument
from docx.table import Table, _Cell
from docx.text.paragraph import Paragraph
from pptx.shapes.autoshape import Shape
from pptx.shapes.base import BaseShape
from pptx.shapes.graphfrm import GraphicFrame
from pptx.shapes.group import GroupShape
from pptx.slide import Slide

from knowledge.parsing.base import ParseError, ParseReport, Section, clean_text, describe, one_line

# A caption names its table: "Table 3: Prices", "表 2 价格", or any paragraph in Word's Caption style.
_CAPTION = re.compile(r"^(table|tab\.|表)\s*[\dA-Za-z一二三四五六七八九十.-]*\s*[:：.\s]", re.IGNORECASE)


def is_caption(text: str) -> bool:
    return bool(text) and len(text) <= 200 and bool(_CAPTION.match(text))


def _markdown_cell(text: str) -> str:
    return " ".join(clean_text(text).split()).replace("|", "\\|")


def markdown_table(
    rows: list[list[str]], caption: str, metadata: dict[str, Any], report: ParseReport
) -> Section | None:
    """A table as a rows-section of Markdown: its caption and header row (with the rule under it) lead
    every chunk of it, and each body row is one line, so a chunk never cuts a row nor loses the header.
    Rows are padded to the widest; blank rows are dropped. None for a table with no text."""
    cells = [[_markdown_cell(cell or "") for cell in row] for row in rows]
    cells = [row for row in cells if any(row)]
    if not cells:
        return None
    width = max(len(row) for row in cells)
    lines = ["| " + " | ".join(row + [""] * (width - len(row))) + " |" for row in cells]
    report.tables += 1
    caption = one_line(caption)
    meta = {**metadata, "table": report.tables, **({"caption": caption} if caption else {})}
    if len(lines) == 1:  # a lone row is its own header
        return Section(lines[0], meta, rows=(1,), header=caption)
    rule = "| " + " | ".join(["---"] * width) + " |"
    header = "\n".join(part for part in (caption, lines[0], rule) if part)
    return Section("\n".join(lines[1:]), meta, rows=tuple(range(2, len(lines) + 1)), header=header)


# --- DOCX ---------------------------------------------------------------------------------


def _docx_cell_text(cell: _Cell) -> str:
    parts: list[str] = []
    for item in cell.iter_inner_content():
        if isinstance(item, Paragraph):
            parts.append(item.text)
        elif isinstance(item, Table):  # a nested table: its cells in order
            parts.extend(_docx_cell_text(inner) for row in item.rows for inner in row.cells)
    return " ".join(" ".join(parts).split())


def _heading_level(paragraph: Paragraph) -> int | None:
    """0 for the Title style, n for "Heading n", None for body text."""
    style = paragraph.style.name if paragraph.style is not None else ""
    if style == "Title":
        return 0
    if match := re.fullmatch(r"Heading (\d)", style):
        return int(match.group(1))
    return None


def _is_docx_caption(paragraph: Paragraph) -> bool:
    style = paragraph.style.name if paragraph.style is not None else ""
    return style == "Caption" or is_caption(one_line(paragraph.text))


def _docx_title(document: DocxDocument) -> str:
    if title := one_line(document.core_properties.title or ""):
        return title
    for paragraph in document.paragraphs:
        if _heading_level(paragraph) is not None and (title := one_line(paragraph.text)):
            return title
    return ""


def _docx_sections(document: DocxDocument, title: str, report: ParseReport) -> Iterator[Section]:
    """Body text under each heading as one section, each table as a rows-section, in document order;
    each carries the heading path above it (without the document's title, read with every chunk)."""
    path: list[tuple[int, str]] = []
    body: list[Paragraph] = []

    def located() -> dict[str, str]:
        names = [name for _, name in path if name]
        if names and names[0] == title:
            names = names[1:]
        return {"section": " > ".join(names)} if names else {}

    def flush() -> Iterator[Section]:
        if text := clean_text("\n\n".join(paragraph.text for paragraph in body)):
            yield Section(text, located())
        body.clear()

    for item in document.iter_inner_content():
        if isinstance(item, Paragraph):
            level = _heading_level(item)
            if level is None:
                body.append(item)
                continue
            yield from flush()
            path = [(above, name) for above, name in path if above < level] + [(level, one_line(item.text))]
        elif isinstance(item, Table):
            caption = body.pop().text if body and _is_docx_caption(body[-1]) else ""
            yield from flush()
            rows = [[_docx_cell_text(cell) for cell in row.cells] for row in item.rows]
            if (section := markdown_table(rows, caption, located(), report)) is not None:
                yield section
    yield from flush()


def parse_docx(raw: bytes, report: ParseReport) -> tuple[str, list[Section]]:
    if not zipfile.is_zipfile(io.BytesIO(raw)):
        raise ParseError("could not read DOCX: the file is not a .docx (zip) package")
    try:
        document = docx.Document(io.BytesIO(raw))
        title = _docx_title(document)
        sections = list(_docx_sections(document, title, report))
    except Exception as exc:  # python-docx/lxml/zipfile raise assorted types on damaged packages
        raise ParseError(f"could not read DOCX: {describe(exc)}") from exc
    return title, sections


# --- PPTX ---------------------------------------------------------------------------------


def _shapes_in_order(shapes: Iterable[BaseShape]) -> Iterator[BaseShape]:
    """Shapes top to bottom, left to right, group shapes opened."""
    ordered = sorted(shapes, key=lambda shape: (shape.top or 0, shape.left or 0))
    for shape in ordered:
        if isinstance(shape, GroupShape):
            yield from _shapes_in_order(shape.shapes)
        else:
            yield shape


def _slide_section(slide: Slide, number: int, report: ParseReport) -> Section | None:
    title_shape = slide.shapes.title
    title = one_line(title_shape.text_frame.text) if title_shape is not None else ""
    parts = [title] if title else []
    for shape in _shapes_in_order(slide.shapes):
        if title_shape is not None and shape.shape_id == title_shape.shape_id:
            continue
        if isinstance(shape, Shape) and shape.has_text_frame:
            parts.append(shape.text_frame.text)
        elif isinstance(shape, GraphicFrame) and shape.has_table:
            rows = [[cell.text for cell in row.cells] for row in shape.table.rows]
            if (table := markdown_table(rows, "", {}, report)) is not None:
                parts.append("\n".join(part for part in (table.header, table.text) if part))
    # A notes page can lack its body placeholder (deleted in PowerPoint): then it holds no notes.
    notes_frame = slide.notes_slide.notes_text_frame if slide.has_notes_slide else None
    if notes_frame is not None and (notes := clean_text(notes_frame.text or "")):
        parts.append(f"Speaker notes: {notes}")
    text = clean_text("\n\n".join(parts))
    if not text:
        return None
    return Section(text, {"slide": number, **({"slide_title": title} if title else {})})


def parse_pptx(raw: bytes, report: ParseReport) -> tuple[str, list[Section]]:
    """One section per slide, with its number; a slide with no text is counted and left out."""
    if not zipfile.is_zipfile(io.BytesIO(raw)):
        raise ParseError("could not read PPTX: the file is not a .pptx (zip) package")
    try:
        presentation = pptx.Presentation(io.BytesIO(raw))
        sections = []
        for number, slide in enumerate(presentation.slides, start=1):
            report.slides += 1
            if (section := _slide_section(slide, number, report)) is not None:
                sections.append(section)
            else:
                report.warnings.append(f"slide {number} has no text")
        title = one_line(presentation.core_properties.title or "")
    except Exception as exc:  # python-pptx/lxml/zipfile raise assorted types on damaged packages
        raise ParseError(f"could not read PPTX: {describe(exc)}") from exc
    if not title and sections:
        title = sections[0].metadata.get("slide_title", "")
    return title, sections
