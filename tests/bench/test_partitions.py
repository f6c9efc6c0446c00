"""Smoke tests of ``bench.partitions``: the tenants' shares, and its recall and build measures on a
few rows of the partitioned table (no timing is checked)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from django.core.management import call_command

from bench.partitions import measure
from bench.partitions.__main__ import tenant_rows
from engines.pgvector_index import PgVectorIndex
from knowledge.models import Chunk
from tests.engines.pgvector_rows import add_chunks, brute_force, fresh_query, scope_of
from tests.factories import DIMENSION, DocumentFactory, KnowledgeBaseFactory

CHUNKS = Chunk._meta.db_table


def test_the_largest_tenant_holds_its_share_and_the_others_split_the_rest():
    assert tenant_rows(1_000_000, 10, 0.5) == [500_000] + [55_500] * 9
    assert tenant_rows(10_000, 2, 0.3) == [3_000, 7_000]


@pytest.mark.django_db
def test_recall_is_measured_against_the_exact_ids_on_the_partitioned_table():
    call_command("partition_chunks", stdout=io.StringIO())
    kbs = [KnowledgeBaseFactory(), KnowledgeBaseFactory()]
    chunks = {
        kb.tenant_id: add_chunks(DocumentFactory(knowledge_base=kb), [fresh_query() for _ in range(30)]) for kb in kbs
    }
    call_command("partition_chunks", "--own", str(kbs[0].tenant_id), stdout=io.StringIO())
    queries = [fresh_query() for _ in range(3)]
    truth = {
        tenant_id: [np.array([chunk_id for chunk_id, _ in brute_force(rows, query, 5)]) for query in queries]
        for tenant_id, rows in chunks.items()
    }
    wrong = {tenant_id: [ids[::-1] + 10**9 for ids in expected] for tenant_id, expected in truth.items()}
    scopes = {kb.tenant_id: scope_of(kb) for kb in kbs}
    engine = PgVectorIndex(CHUNKS)

    found = measure.search_tenants(engine, scopes, truth, queries, 5, 20)
    assert {tenant_id: entry["recall"] for tenant_id, entry in found.items()} == dict.fromkeys(scopes, 1.0)
    missed = measure.search_tenants(engine, scopes, wrong, queries, 5, 20)
    assert {tenant_id: entry["recall"] for tenant_id, entry in missed.items()} == dict.fromkeys(scopes, 0.0)
    assert measure.build_seconds(f"{CHUNKS}_t{kbs[0].tenant_id}", DIMENSION, 8, 32) >= 0
