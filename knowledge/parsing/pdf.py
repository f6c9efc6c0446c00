"""PDF pages and images: a page's text in reading order around its tables, each table a Markdown table
(pdfplumber finds them) with its caption; a page with no text layer, and an image, read by OCR."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pdfplumber
import pypdf
from django.conf import settings
from PIL import Image, ImageOps, UnidentifiedImageError
from pypdf.errors import DependencyError

from engines import ocr
from knowledge.parsing.base import ParseError, ParseReport, Section, clean_text, describe, one_line
from knowledge.parsing.office import is_caption, markdown_table


def _read_by_ocr(image: Image.Image, report: ParseReport) -> str:
    """The image's text; raises ocr.OCRError."""
    text = ocr.recognize(image, languages=settings.OCR_LANGUAGES, timeout_s=settings.OCR_PAGE_TIMEOUT_S)
    report.ocr_pages += 1
    report.ocr_engine = ocr.ENGINE
    return clean_text(text)


def _outside(boxes: list[tuple[float, float, float, float]]) -> Callable[[dict[str, Any]], bool]:
    def keep(obj: dict[str, Any]) -> bool:
        if obj.get("object_type") != "char":
            return True
        x, y = (obj["x0"] + obj["x1"]) / 2, (obj["top"] + obj["bottom"]) / 2
        return not any(x0 <= x <= x1 and top <= y <= bottom for x0, top, x1, bottom in boxes)

    return keep


def _page_sections(page: pdfplumber.page.Page, number: int, report: ParseReport) -> list[Section]:
    """Text above, between and below the page's tables, and the tables, top to bottom. A table's caption
    is the line right above it when it reads like one ("Table 2: ...", "表 2 ...")."""
    located = {"page": number}
    if not page.chars:
        if not page.images:
            return []
        try:
            text = _read_by_ocr(page.to_image(resolution=settings.OCR_DPI).original, report)
        except ocr.OCRError as exc:
            report.warnings.append(f"page {number} has no text layer and OCR could not read it: {exc}")
            return []
        return [Section(text, {**located, "ocr": True})] if text else []
    tables = sorted(page.find_tables(), key=lambda table: table.bbox[1])
    text_page = page.filter(_outside([table.bbox for table in tables])) if tables else page
    left, top, right, bottom = page.bbox
    sections: list[Section] = []
    y = top
    for table in tables:
        caption = ""
        if table.bbox[1] > y:
            lines = (text_page.crop((left, y, right, table.bbox[1])).extract_text() or "").split("\n")
            if lines and is_caption(one_line(lines[-1])):
                caption = lines.pop()
            if text := clean_text("\n".join(lines)):
                sections.append(Section(text, located))
        rows = [[cell or "" for cell in row] for row in table.extract()]
        if (section := markdown_table(rows, caption, located, report)) is not None:
            sections.append(section)
        y = max(y, min(table.bbox[3], bottom))
    if y < bottom and (text := clean_text(text_page.crop((left, y, right, bottom)).extract_text() or "")):
        sections.append(Section(text, located))
    return sections


def parse_pdf(raw: bytes, report: ParseReport) -> tuple[str, list[Section]]:
    try:
        reader = pypdf.PdfReader(io.BytesIO(raw))
        if reader.is_encrypted and reader.decrypt("") == pypdf.PasswordType.NOT_DECRYPTED:
            raise ParseError("PDF is encrypted")
        title = one_line(str(reader.metadata.title or "")) if reader.metadata else ""
    except ParseError:
        raise
    except DependencyError as exc:  # e.g. AES encryption without the optional "cryptography" package
        raise ParseError(f"PDF is encrypted ({describe(exc)})") from exc
    except Exception as exc:  # pypdf raises many types (PdfReadError, ValueError, KeyError...) on bad files
        raise ParseError(f"could not read PDF: {describe(exc)}") from exc
    sections: list[Section] = []
    try:
        with pdfplumber.open(io.BytesIO(raw), password="") as pdf:
            for number, page in enumerate(pdf.pages, start=1):
                report.pages += 1
                try:
                    sections.extend(_page_sections(page, number, report))
                except Exception as exc:  # one damaged page is a warning; the others are still read
                    report.warnings.append(f"page {number} could not be read: {describe(exc)}")
    except Exception as exc:  # pdfminer raises assorted types (PDFSyntaxError, PSEOF...) on bad files
        raise ParseError(f"could not read PDF: {describe(exc)}") from exc
    return title, sections


def parse_image(raw: bytes, report: ParseReport) -> tuple[str, list[Section]]:
    """A scan or a photo of a page (PNG, JPEG): its text by OCR, upright as its EXIF orientation says."""
    try:
        image: Image.Image = Image.open(io.BytesIO(raw))
        image.load()
        image = ImageOps.exif_transpose(image)
    except UnidentifiedImageError as exc:
        raise ParseError("could not read image: the file is not a PNG or JPEG image") from exc
    except (OSError, ValueError) as exc:  # e.g. a truncated file
        raise ParseError(f"could not read image: {describe(exc)}") from exc
    report.pages = 1
    try:
        text = _read_by_ocr(image, report)
    except ocr.OCRError as exc:
        raise ParseError(f"could not read the image's text by OCR: {exc}") from exc
    return "", [Section(text, {"page": 1, "ocr": True})] if text else []
