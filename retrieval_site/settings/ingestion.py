"""Ingestion: chunking, stored originals, uploads, versions and sources."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

from retrieval_site.settings.base import CommaList, Networks, Section


class Ingestion(Section):
    title = "Ingestion, versions and sources"

    CHUNK_SIZE_TOKENS: PositiveInt = 200  # for new KBs
    CHUNK_OVERLAP_TOKENS: NonNegativeInt = 32
    # Originals of ingested files, kept so a knowledge base can be rebuilt without its clients: any Django
    # storage backend (e.g. S3-compatible through django-storages); unset, files under ORIGINALS_DIR.
    ORIGINALS_DIR: Path = Field(default_factory=lambda data: data["VAR_DIR"] / "originals")
    ORIGINALS_STORAGE_BACKEND: str = ""
    # Uploads (POST /api/v1/knowledge-bases/{id}/documents); MAX_REQUEST_BYTES bounds the other bodies.
    UPLOAD_MAX_FILE_BYTES: PositiveInt = 20 * 1024 * 1024
    UPLOAD_MAX_REQUEST_BYTES: PositiveInt = 100 * 1024 * 1024
    # OCR of images and of PDF pages with no text layer (Debian's tesseract-ocr; engines/ocr.py): its
    # languages, the resolution a PDF page is rendered at, and the time one page may take.
    OCR_LANGUAGES: str = "chi_sim+eng"
    OCR_DPI: PositiveInt = 200
    OCR_PAGE_TIMEOUT_S: PositiveFloat = 120.0
    # Versions retired (or failed) longer than this are purged by the hourly beat task; until then a
    # retired version can be activated again (rollback).
    KB_VERSION_RETENTION_DAYS: NonNegativeInt = 7
    # activate "gated": a ready version switches only if its nDCG@10 on the KB's query set is at most
    # this much below the active version's (retrieval.evaluation.gate).
    KB_VERSION_GATE_NDCG: NonNegativeFloat = 0.005
    # Folder sources (POST /api/v1/knowledge-bases/{id}/sources) must lie under one of these folders; a
    # relative source path is taken from the first. Relative roots are taken from the project folder.
    KNOWLEDGE_SOURCE_ROOTS: CommaList = ["var/sources"]
    # A document whose file or URL left its source stops being searched at once; its row and stored
    # original are purged this long after (the hourly beat task), so a file that comes back keeps its id.
    SOURCE_REMOVAL_GRACE_HOURS: NonNegativeInt = 24
    # URL sources: each fetch (redirects included) within this total time and size.
    SOURCE_URL_TIMEOUT_S: PositiveFloat = 30.0
    SOURCE_URL_MAX_BYTES: PositiveInt = 20 * 1024 * 1024
    # URL sources never reach private, loopback or link-local addresses (nor redirect there), except
    # in these networks, e.g. 10.1.0.0/16 for an intranet wiki (tests allow 127.0.0.1/32).
    SOURCE_URL_ALLOWED_NETWORKS: Networks = []
    # Crash tests (core.faults): stops an ingesting process at a boundary of the commit protocol of rows
    # and keyword index, to be killed there. Allowed only with FAULT_INJECTION (tests) or DEBUG: otherwise
    # startup refuses it.
    CRASH_TEST_PAUSE_AT: Literal["", "rows_written", "rows_committed", "index_committed"] = ""
    FAULT_INJECTION: bool = False
