"""``bench/pgvector_query.py``'s reading of the server: its buffer counts and sizes (no timing, no large data)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from django.db import connection

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import pgvector_query  # noqa: E402  (bench/ is not a package; its scripts import _common as a sibling)
from tests.factories import ChunkFactory, DocumentFactory, KnowledgeBaseFactory  # noqa: E402

pytestmark = pytest.mark.django_db


def test_buffers_reads_the_pages_and_execution_time_of_a_real_plan(tenant):
    document = DocumentFactory(knowledge_base=KnowledgeBaseFactory(tenant=tenant))
    ChunkFactory.create_batch(3, document=document)
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) SELECT id FROM knowledge_chunk WHERE tenant_id = %s", [tenant.pk])
        plan = cursor.fetchall()
        cursor.execute("SELECT count(*) FROM knowledge_chunk WHERE tenant_id = %s", [tenant.pk])
        (rows,) = cursor.fetchone()
    counted = pgvector_query.buffers(plan)
    assert rows == 3
    assert counted["hit"] + counted["read"] > 0  # the table's page(s) at least
    assert counted["ms"] >= 0


def test_server_memory_names_the_settings_the_server_runs_with():
    shown = pgvector_query.server_memory(connection)
    with connection.cursor() as cursor:
        cursor.execute("SHOW shared_buffers")
        assert shown["shared_buffers"] == cursor.fetchone()[0]
    assert shown["table_mb"] >= 0 and shown["toast_mb"] >= 0
