"""Reader graphs (``engines.principal_graphs``) on real pgvector: a reader whose principal has a graph
walks it and gets exactly the true top 10 of the rows it may read (a part that walks the tenant's
graph, which holds every test's rows, is held to readable rows and most of the top 10); rows several
parts find come once;
business filters hold in every part; a dropped graph is walked no more. The graphs are built in the
test's transaction (not CONCURRENTLY), so they go with its rollback. Expectations are numpy's rankings
over the row sets the tests built."""

from __future__ import annotations

import re

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from engines import principal_graphs
from engines.hnsw_parameters import BuildParameters
from engines.pgvector_index import PgVectorIndex
from retrieval.filters import compile_filters
from tests.engines.pgvector_rows import CHUNKS, add_chunks, assert_same_ranking, brute_force, graph_walk_only, scope_of
from tests.factories import DIMENSION, DocumentFactory, KnowledgeBaseFactory

pytestmark = pytest.mark.django_db

ROWS = 1_000
BUILD = BuildParameters(16, 64)


def acl_of(i: int) -> list[str]:
    """Every 10th row group:ten; every 20th also group:x; every 7th public; the rest group:other."""
    acl = ["group:ten"] if i % 10 == 0 else []
    acl += ["group:x"] if i % 20 == 0 else []
    acl += ["*"] if i % 7 == 0 else []
    return acl or ["group:other"]


@pytest.fixture
def kb():
    kb = KnowledgeBaseFactory()
    rng = np.random.default_rng(48)
    vectors = rng.standard_normal((ROWS, DIMENSION)).astype(np.float32)
    chunks = add_chunks(
        DocumentFactory(knowledge_base=kb), list(vectors), acl=[acl_of(i) for i in range(ROWS)],
        metadata=[{"shop": i % 3} for i in range(ROWS)],
    )  # fmt: skip
    PgVectorIndex(CHUNKS).ensure_index(DIMENSION)
    yield kb, chunks, rng
    principal_graphs._graphed.cache_clear()


def graph(kb, principal: str) -> principal_graphs.ReaderGraph:
    return principal_graphs.create(CHUNKS, kb.tenant_id, principal, DIMENSION, BUILD, concurrently=False)


def readable(chunks, reader, shop=None):
    return [c for c in chunks if set(c.acl) & set(reader) and (shop is None or c.metadata["shop"] == shop)]


def assert_found_among(hits, expected, readable_ids) -> None:
    """A walk of the tenant's graph (which holds every test's rows) is approximate: every hit readable,
    no chunk twice, and most of the true top 10."""
    ids = [hit.chunk_id for hit in hits]
    assert len(ids) == len(set(ids)) == 10 and set(ids) <= readable_ids
    assert len(set(ids) & {chunk_id for chunk_id, _ in expected}) >= 7


def walked_indexes(queries) -> list[str]:
    """The index each captured nearest-rows query of a walk uses, by EXPLAIN of it."""
    names = []
    for query in queries:
        statement = next((s for s in query["sql"].split("; ") if s.startswith("SELECT id,")), None)
        if statement is None or "ORDER BY (embedding::halfvec" not in statement:
            continue
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN {statement}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
        names.append(re.search(r"Index Scan using (\w+)", plan).group(1))
    return names


def test_a_reader_walks_its_principals_graph_and_gets_the_true_top_10(kb):
    kb, chunks, rng = kb
    ten = graph(kb, "group:ten")
    assert ten.valid and ten.rows in (0, len(readable(chunks, ["group:ten"])))  # reltuples: 0 until analyzed
    reader = ("group:ten",)
    index = PgVectorIndex(CHUNKS, exact_scan_threshold=0)
    query = rng.standard_normal(DIMENSION).astype(np.float32)
    with CaptureQueriesContext(connection) as captured, graph_walk_only():
        hits = index.search(scope_of(kb), query, 10, compile_filters(None, reader).sql)
    assert_same_ranking(hits, brute_force(readable(chunks, reader), query, 10))
    with graph_walk_only():
        assert ten.name in walked_indexes(captured.captured_queries)


def test_a_graph_is_walked_where_the_tenants_graph_would_scan_exactly(kb):
    """On a large table the exact-scan limit grows with the tenant's graph; a reader graph is walked
    from its own (smaller) limit on, and a scope under that is still scanned exactly."""
    kb, chunks, rng = kb
    ten, _ = graph(kb, "group:ten"), graph(kb, "group:x")
    index = PgVectorIndex(CHUNKS, exact_scan_threshold=50)  # group:ten reads 100 rows, group:x 50
    index.exact_limit = lambda scope: 10_000  # type: ignore[method-assign]  # the limit of a graph of ~1.5M rows
    query = rng.standard_normal(DIMENSION).astype(np.float32)
    for reader, walked in [(("group:ten",), [ten.name]), (("group:x",), [])]:
        with CaptureQueriesContext(connection) as captured:
            hits = index.search(scope_of(kb), query, 10, compile_filters(None, reader).sql)
        assert_same_ranking(hits, brute_force(readable(chunks, reader), query, 10))
        with graph_walk_only():  # EXPLAIN under the walk's own steering
            assert walked_indexes(captured.captured_queries) == walked
    principal_graphs.drop(CHUNKS, kb.tenant_id, "group:ten", DIMENSION, concurrently=False)
    with CaptureQueriesContext(connection) as captured:
        hits = index.search(scope_of(kb), query, 10, compile_filters(None, ("group:ten",)).sql)
    assert_same_ranking(hits, brute_force(readable(chunks, ("group:ten",)), query, 10))
    assert walked_indexes(captured.captured_queries) == []  # without its graph: exact, under the large limit


def test_rows_two_graphed_principals_admit_come_once(kb):
    kb, chunks, rng = kb
    graph(kb, "group:ten"), graph(kb, "group:x")
    reader = ("*", "group:ten", "group:x")  # group:x's rows are all group:ten's too; '*' has no graph
    index = PgVectorIndex(CHUNKS, exact_scan_threshold=0)
    for _ in range(3):
        query = rng.standard_normal(DIMENSION).astype(np.float32)
        with graph_walk_only():
            hits = index.search(scope_of(kb), query, 10, compile_filters(None, reader).sql)
        rows = readable(chunks, reader)  # the '*' part walks the tenant's graph
        assert_found_among(hits, brute_force(rows, query, 10), {c.pk for c in rows})


def test_business_filters_hold_in_every_part(kb):
    kb, chunks, rng = kb
    graph(kb, "group:ten")
    reader = ("*", "group:ten")
    compiled = compile_filters({"metadata.shop": 1}, reader)
    index = PgVectorIndex(CHUNKS, exact_scan_threshold=0)
    query = rng.standard_normal(DIMENSION).astype(np.float32)
    with graph_walk_only():
        hits = index.search(scope_of(kb), query, 10, compiled.sql)
    rows = readable(chunks, reader, shop=1)
    assert_found_among(hits, brute_force(rows, query, 10), {c.pk for c in rows})


def test_a_reader_without_a_graphed_principal_and_a_dropped_graph_take_the_main_graph(kb):
    kb, chunks, rng = kb
    ten = graph(kb, "group:ten")
    index = PgVectorIndex(CHUNKS, exact_scan_threshold=0)
    query = rng.standard_normal(DIMENSION).astype(np.float32)
    for reader in [("group:other",), ("group:ten",)]:
        if reader == ("group:ten",):
            assert principal_graphs.drop(CHUNKS, kb.tenant_id, "group:ten", DIMENSION, concurrently=False)
        with CaptureQueriesContext(connection) as captured, graph_walk_only():
            hits = index.search(scope_of(kb), query, 10, compile_filters(None, reader).sql)
        rows = readable(chunks, reader)
        assert_found_among(hits, brute_force(rows, query, 10), {c.pk for c in rows})
        with graph_walk_only():
            assert ten.name not in walked_indexes(captured.captured_queries)
    assert principal_graphs.listed(CHUNKS) == []


def test_another_tenants_graph_is_not_this_tenants(kb):
    kb, chunks, rng = kb
    other = KnowledgeBaseFactory()
    graph(other, "group:ten")
    assert principal_graphs.graphs_for(CHUNKS, kb.tenant_id, DIMENSION, ("group:ten",)) == {}
    assert set(principal_graphs.graphs_for(CHUNKS, other.tenant_id, DIMENSION, ("group:ten",))) == {"group:ten"}


def test_the_parts_of_a_split_are_exactly_the_filters_rows(kb):
    kb, chunks, _ = kb
    compiled = compile_filters({"metadata.shop": 2}, ("*", "group:ten", "group:x"))
    parts = principal_graphs.split(compiled.sql, ["group:ten", "group:x"])
    assert [principal for _, principal in parts] == ["group:ten", "group:x", None]
    found: list[int] = []
    with connection.cursor() as cursor:
        for part, _ in parts:
            cursor.execute(
                f"SELECT id FROM {CHUNKS} WHERE tenant_id = %s AND ({part.sql})", [kb.tenant_id, *part.params]
            )
            found += [row[0] for row in cursor.fetchall()]
    expected = {c.pk for c in readable(chunks, ("*", "group:ten", "group:x"), shop=2)}
    assert set(found) == expected and len(found) > len(expected)  # group:x's rows are in two parts
    # every principal of the reader graphed: no rest to search
    only = principal_graphs.split(compile_filters(None, ("group:ten",)).sql, ["group:ten"])
    assert [principal for _, principal in only] == ["group:ten"]
