"""Ingestion from stored originals (knowledge.ingestion.stored), as the worker runs it."""

import hashlib

import pytest
from django.core.files.base import ContentFile

from knowledge.ingestion.files import keep_original
from knowledge.ingestion.stored import ingest_stored_files
from knowledge.models import Document
from knowledge.versions import start_version_build

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def test_files_ingested_while_a_version_builds_land_in_both(kb, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):  # the build task is recorded, never sent
        building, _ = start_version_build(kb, activate=False, chunk_size=64)
    data = b"Returns are accepted within 30 days of delivery."
    original = keep_original(kb, "a.txt", hashlib.md5(data).hexdigest(), ContentFile(data))
    files = [{"source_uri": "a.txt", "original": original, "labels": None}]  # an ingestion task's arguments
    ingest_stored_files(kb, files, on_progress=lambda done: None)
    document = Document.objects.get(knowledge_base=kb)
    assert document.chunks.filter(kb_version=kb.active_version).exists()
    assert document.chunks.filter(kb_version=building).exists()
    ingest_stored_files(kb, files, on_progress=lambda done: None)  # again: still one chunk set in each
    for version in (kb.active_version, building):
        ordinals = list(document.chunks.filter(kb_version=version).values_list("ordinal", flat=True))
        assert sorted(ordinals) == list(range(len(ordinals)))
