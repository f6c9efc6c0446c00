"""OCR of page images with Debian's Tesseract (``tesseract-ocr`` with ``chi_sim`` and ``eng``), run as a
subprocess: the image in on stdin, the text out on stdout.

Chosen over rapidocr-onnxruntime (docs/benchmarks/decisions.md, "OCR engine"): on the same generated
pages it was faster (0.6-1.4 s against 1.3-2.8 s a page), kept the spaces between English words (RapidOCR
dropped them, "Sky-100routerinstallationguide", which no keyword search can match), and needs no OpenCV in
the service's environment. RapidOCR read degraded Chinese better; a blurred, rotated scan is where
Tesseract errs.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess

from PIL import Image

ENGINE = "tesseract"
# Tesseract writes a space between CJK characters (and between them and CJK punctuation): it reads them
# as words. Those spaces are no part of the text.
_CJK = r"\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef"
_CJK_SPACE = re.compile(rf"(?<=[{_CJK}]) +(?=[{_CJK}])")


class OCRError(Exception):
    """OCR could not read an image; the message says why, for the document's parse report."""


class OCRUnavailable(OCRError):
    """Tesseract (or one of the languages asked for) is not installed."""


class OCRFailed(OCRError):
    """Tesseract ran and failed on this image, or ran out of time."""


def available_languages() -> set[str]:
    if shutil.which("tesseract") is None:
        return set()
    listed = subprocess.run(["tesseract", "--list-langs"], capture_output=True, text=True, timeout=30, check=False)
    return {line.strip() for line in listed.stdout.splitlines()[1:] if line.strip()}


def missing(languages: str) -> str:
    """Why OCR in ``languages`` ("chi_sim+eng") cannot run here; empty when it can."""
    if shutil.which("tesseract") is None:
        return "tesseract is not installed (Debian: apt-get install tesseract-ocr tesseract-ocr-chi-sim)"
    absent = set(languages.split("+")) - available_languages()
    return f"tesseract has no {', '.join(sorted(absent))} language data" if absent else ""


def recognize(image: Image.Image, *, languages: str, timeout_s: float) -> str:
    """The text in ``image``, lines as Tesseract found them; raises OCRUnavailable or OCRFailed."""
    if shutil.which("tesseract") is None:
        raise OCRUnavailable(missing(languages))
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="PNG")
    try:
        done = subprocess.run(
            ["tesseract", "stdin", "stdout", "-l", languages, "--psm", "3"],
            input=buffer.getvalue(),
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise OCRFailed(f"OCR took longer than {timeout_s:g} s") from exc
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip().splitlines()
        message = detail[-1] if detail else f"exit status {done.returncode}"
        if "Failed loading language" in done.stderr.decode(errors="replace"):
            raise OCRUnavailable(missing(languages) or message)
        raise OCRFailed(f"OCR failed: {message}")
    return _CJK_SPACE.sub("", done.stdout.decode(errors="replace"))
