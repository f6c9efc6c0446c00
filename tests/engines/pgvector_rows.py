"""Rows, queries and plan checks for the ``PgVectorIndex`` tests (test_pgvector_index.py,
test_pgvector_scope.py).

Expectations are brute-force numpy cosine rankings over row sets the tests built themselves (never
over rows selected by the code under test).

Two facts about the test database shape these tests:

* With a few thousand rows PostgreSQL prefers a sequential / bitmap scan plus a sort even when the
  search allows index scans, so the "HNSW path" would not walk the graph. ``graph_walk_only()``
  disables the alternatives around the searches meant to walk it, and the tests check the plan.
* Rolled-back tests leave their entries in the HNSW graph until VACUUM. Thousands of entries with one
  identical vector form a clique that the walk cannot leave, so each test uses its own query vector.
"""

from __future__ import annotations

import contextlib
import itertools
import re

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from engines.base import SearchScope
from knowledge.models import Chunk
from retrieval.filters import compile_filters
from tests.factories import DIMENSION, ChunkFactory, unit_vector

NO_FILTER = compile_filters(None).sql
CHUNKS = Chunk._meta.db_table
HNSW_INDEX = f"chunk_embedding_hnsw_{DIMENSION}"
_query_seeds = itertools.count(10_000_000)  # far from the factory's sequence seeds


def fresh_query(dimension: int = DIMENSION) -> np.ndarray:
    return unit_vector(next(_query_seeds), dimension)


def scope_of(kb, *versions, dim: int = DIMENSION) -> SearchScope:
    version_ids = tuple(v.pk for v in versions) or (kb.active_version_id,)
    return SearchScope(tenant_id=kb.tenant_id, version_ids=version_ids, embedding_dim=dim)


def add_chunks(document, vectors, *, version=None, **fields) -> list[Chunk]:
    """Bulk-insert one chunk per vector; a list value (except ``tags``) gives one value per row."""
    chunks = []
    for i, vector in enumerate(vectors):
        row = {k: (v[i] if isinstance(v, list) and k != "tags" else v) for k, v in fields.items()}
        if version is not None:
            row["kb_version"] = version
        chunks.append(ChunkFactory.build(document=document, embedding=np.asarray(vector, dtype=np.float32), **row))
    return Chunk.objects.bulk_create(chunks)


def brute_force(chunks, query, top_k: int) -> list[tuple[int, float]]:
    """Top-k (id, cosine similarity) by exact numpy cosine over exactly these rows."""
    if not chunks:
        return []
    ids = np.array([c.pk for c in chunks])
    matrix = np.stack([np.asarray(c.embedding, dtype=np.float64) for c in chunks])
    q = np.asarray(query, dtype=np.float64)
    similarity = matrix @ q / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(q))
    order = np.argsort(-similarity, kind="stable")[:top_k]
    return [(int(ids[i]), float(similarity[i])) for i in order]


def assert_same_ranking(hits, expected):
    assert [h.chunk_id for h in hits] == [chunk_id for chunk_id, _ in expected]
    for hit, (_, score) in zip(hits, expected):
        assert hit.score == pytest.approx(score, abs=1e-5)


def plans(queries) -> list[str]:
    """The enable_indexscan value each nearest-neighbour query of a search ran under, in order ('off' =
    exact scan, 'on' = HNSW allowed). The settings travel with the query in one round trip; inside a
    transaction (as in these tests) the same round trip puts 'on' back."""
    values = []
    for query in queries:
        if "<=>" in query["sql"]:
            chosen, restored = re.findall(r"set_config\('enable_indexscan', '(on|off)', true\)", query["sql"])
            assert restored == "on", "a search must leave index scans enabled"
            values.append(chosen)
    return values


def nearest_neighbour_statement(sql: str) -> str:
    return next(statement for statement in sql.split("; ") if "<=>" in statement)


@contextlib.contextmanager
def graph_walk_only():
    """Around an HNSW-path search: no sequential or bitmap scan and no sort, so an ordered index scan
    (HNSW) is the only undisabled plan. Never around an exact search (it would steer that to HNSW)."""

    def set_all(value):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT set_config('enable_seqscan', %s, true), set_config('enable_bitmapscan', %s, true),"
                " set_config('enable_sort', %s, true)",
                [value] * 3,
            )

    set_all("off")
    try:
        yield
    finally:
        set_all("on")


def walked_the_graph(queries) -> bool:
    """Whether the last nearest-neighbour query the search ran plans as an HNSW index scan."""
    sql = nearest_neighbour_statement([q["sql"] for q in queries if "<=>" in q["sql"]][-1])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),"
            " set_config('enable_sort', 'off', true)"
        )
        cursor.execute("EXPLAIN " + sql)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute(
            "SELECT set_config('enable_seqscan', 'on', true), set_config('enable_bitmapscan', 'on', true),"
            " set_config('enable_sort', 'on', true)"
        )
    return f"Index Scan using {HNSW_INDEX}" in plan


def hnsw_search(index, scope, query, top_k, filters):
    """Search expected to take the HNSW path; returns (hits, plans, walked the graph)."""
    with CaptureQueriesContext(connection) as ctx, graph_walk_only():
        hits = index.search(scope, query, top_k, filters)
    return hits, plans(ctx.captured_queries), walked_the_graph(ctx.captured_queries)
