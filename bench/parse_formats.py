"""What reading a file costs per page, by format (no database, no model): a text PDF through the
parser (pdfplumber, tables) against pypdf's plain text, a scanned PDF through OCR (Tesseract), and an
image. Figures: docs/BENCHMARKS.md, "Ingestion pipeline" (parsing and OCR per page).

    .venv/bin/python bench/parse_formats.py                # 20 text pages, 3 scanned pages
    .venv/bin/python bench/parse_formats.py --scanned 5

Files are made in a temporary folder (fpdf2 and Pillow, as the tests make them) and deleted.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "retrieval_site.settings")

import django

django.setup()

import pypdf  # noqa: E402
from fpdf import FPDF  # noqa: E402

from knowledge.parsing import parse_file  # noqa: E402
from tests.knowledge.formats import SCAN_LINES, scanned_page  # noqa: E402


def _text_pdf(path: Path, pages: int) -> None:
    pdf = FPDF()
    pdf.set_font("Helvetica", size=10)
    for page in range(pages):
        pdf.add_page()
        for line in range(40):
            pdf.cell(text=f"Line {line} of page {page}: the SKY router ships with a charger and a cable.")
            pdf.ln(6)
    pdf.output(str(path))


def _scanned_pdf(path: Path, image: Path, pages: int) -> None:
    scanned_page(SCAN_LINES * 8).save(image)
    pdf = FPDF()
    for _ in range(pages):
        pdf.add_page()
        pdf.image(str(image), x=0, y=0, w=210)
    pdf.output(str(path))


def _timed(work) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=20, help="text PDF pages")
    parser.add_argument("--scanned", type=int, default=3, help="scanned PDF pages (OCR)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        _text_pdf(tmp / "text.pdf", args.pages)
        plain = _timed(lambda: [page.extract_text() for page in pypdf.PdfReader(tmp / "text.pdf").pages])
        parsed = _timed(lambda: parse_file(tmp / "text.pdf"))
        print(f"text PDF, {args.pages} pages: pypdf {plain / args.pages * 1000:.0f} ms/page, "
              f"parser {parsed / args.pages * 1000:.0f} ms/page")  # fmt: skip
        _scanned_pdf(tmp / "scan.pdf", tmp / "scan.png", args.scanned)
        ocr = _timed(lambda: parse_file(tmp / "scan.pdf"))
        print(f"scanned PDF, {args.scanned} pages: {ocr / args.scanned:.2f} s/page (OCR at the OCR_DPI setting)")
        image = _timed(lambda: parse_file(tmp / "scan.png"))
        print(f"PNG, 1240 px wide: {image:.2f} s")
        print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
