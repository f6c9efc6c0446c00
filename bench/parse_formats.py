"""What reading a file costs per page, by format (no database, no model): a text PDF through the
parser (pdfplumber, tables) against pypdf's plain text, a scanned PDF through OCR (Tesseract), and an
image. Figures: docs/BENCHMARKS.md, "Ingestion pipeline" (parsing and OCR per page).

    .venv/bin/python -m bench.parse_formats                # 20 text pages, 3 scanned pages
    .venv/bin/python -m bench.parse_formats --scanned 5

Files are made in a temporary folder (fpdf2 and Pillow, as the tests make them) and deleted.
Writes bench/results/parse_formats-<date>.json.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench.harness import project, results


def _text_pdf(path: Path, pages: int) -> None:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("Helvetica", size=10)
    for page in range(pages):
        pdf.add_page()
        for line in range(40):
            pdf.cell(text=f"Line {line} of page {page}: the SKY router ships with a charger and a cable.")
            pdf.ln(6)
    pdf.output(str(path))


def _scanned_pdf(path: Path, image: Path, pages: int) -> None:
    from fpdf import FPDF

    from tests.knowledge.formats import SCAN_LINES, scanned_page

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
    project.setup_django()
    import pypdf

    from knowledge.parsing import parse_file

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
    result = {
        "config": vars(args),
        "machine": results.machine_info(),
        "text_pdf_ms_per_page": {
            "pypdf": round(plain / args.pages * 1000),
            "parser": round(parsed / args.pages * 1000),
        },
        "scanned_pdf_s_per_page": round(ocr / args.scanned, 2),
        "png_s": round(image, 2),
    }
    print(f"wrote {results.write_result('parse_formats', result)}")


if __name__ == "__main__":
    main()
