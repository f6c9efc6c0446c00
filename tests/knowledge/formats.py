"""Small files of every format the parsers read, made with the real libraries (openpyxl, python-pptx,
fpdf2, python-docx, Pillow), for the parsing and ingestion tests."""

from __future__ import annotations

import datetime
from pathlib import Path

import docx
import openpyxl
import pptx
from fpdf import FPDF
from PIL import Image, ImageDraw, ImageFont

from engines import ocr

CJK_FONT = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")


def ocr_missing() -> str:
    """Why the OCR tests cannot run here; empty when they can."""
    if reason := ocr.missing("chi_sim+eng"):
        return reason
    return "" if CJK_FONT.exists() else "no CJK font to draw the scanned page with (Debian: fonts-wqy-microhei)"


def write_xlsx(path: Path) -> Path:
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.title = "Prices"
    sheet.append(["Model", "Price (EUR)", "Ports", "Released"])
    sheet.append(["SKY-100", 49, 4, datetime.date(2025, 3, 1)])
    sheet.append([None, None, None, None])  # a blank row is skipped, its number kept by the next
    sheet.append(["SKY-200", 89.5, 8, datetime.date(2026, 1, 15)])
    stock = workbook.create_sheet("库存")
    stock.append(["仓库", "型号", "数量"])
    stock.append(["成都", "SKY-100", 120])
    hidden = workbook.create_sheet("Internal")
    hidden.append(["secret", "cost"])
    hidden.append(["SKY-100", 12])
    hidden.sheet_state = "hidden"
    workbook.properties.title = "Router catalogue"
    workbook.save(path)
    return path


def write_pptx(path: Path) -> Path:
    presentation = pptx.Presentation()
    first = presentation.slides.add_slide(presentation.slide_layouts[1])  # title and content
    first.shapes.title.text = "Wiring the SKY-100"
    first.placeholders[1].text_frame.text = "Connect the WAN port to the modem."
    first.notes_slide.notes_text_frame.text = "Remind the audience the WAN port is yellow."
    second = presentation.slides.add_slide(presentation.slide_layouts[5])  # title only
    second.shapes.title.text = "保修政策"
    table = second.shapes.add_table(
        2, 2, pptx.util.Inches(1), pptx.util.Inches(2), pptx.util.Inches(6), pptx.util.Inches(1)
    ).table
    for column, (head, value) in enumerate([("型号", "SKY-100"), ("保修", "24个月")]):
        table.cell(0, column).text = head
        table.cell(1, column).text = value
    presentation.slides.add_slide(presentation.slide_layouts[6])  # blank: no text at all
    presentation.save(str(path))
    return path


def write_pdf_with_table(path: Path, rows: int = 2) -> Path:
    pdf = FPDF()
    pdf.set_title("Router prices 2026")
    pdf.set_font("Helvetica", size=11)
    pdf.add_page()
    pdf.multi_cell(0, 8, "Our router prices for 2026 are listed below.")
    pdf.ln(4)
    pdf.cell(text="Table 1: Router prices")
    pdf.ln(8)
    with pdf.table() as table:
        for row in [("Model", "Price", "Ports")] + [
            (f"SKY-{100 * n}", f"{40 + 9 * n} EUR", str(2 * n)) for n in range(1, rows + 1)
        ]:
            cells = table.row()
            for cell in row:
                cells.cell(cell)
    pdf.ln(4)
    pdf.multi_cell(0, 8, "Prices include VAT.")
    pdf.output(str(path))
    return path


def scanned_page(lines: list[str]) -> Image.Image:
    """A page of text as an image only, as a scanner makes it."""
    image = Image.new("RGB", (1240, 160 + 110 * len(lines)), "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.truetype(str(CJK_FONT), 40)
    for number, line in enumerate(lines):
        draw.text((80, 80 + 110 * number), line, fill="black", font=font)
    return image


SCAN_LINES = ["Reset the SKY-100 by holding the button.", "保修期为二十四个月。"]


def write_scanned_pdf(path: Path, image_path: Path) -> Path:
    """Page 1 has a text layer, page 2 is a scan only."""
    scanned_page(SCAN_LINES).save(image_path)
    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    pdf.add_page()
    pdf.multi_cell(0, 8, "Service manual, scanned appendix follows.")
    pdf.add_page()
    pdf.image(str(image_path), x=0, y=0, w=210)
    pdf.output(str(path))
    return path


def write_docx_with_headings(path: Path) -> Path:
    document = docx.Document()
    document.add_heading("Router Manual", level=0)
    document.add_heading("Installation", level=1)
    document.add_paragraph("Unpack the unit.")
    document.add_heading("Wiring", level=2)
    document.add_paragraph("Connect the yellow WAN port.")
    document.add_paragraph("Table 2: Cable colours", style="Caption")
    table = document.add_table(rows=3, cols=2)
    for row, (port, colour) in enumerate([("Port", "Colour"), ("WAN", "yellow"), ("LAN", "blue")]):
        table.cell(row, 0).text = port
        table.cell(row, 1).text = colour
    document.add_heading("Warranty", level=1)
    document.add_paragraph("Two years from purchase.")
    document.save(str(path))
    return path
