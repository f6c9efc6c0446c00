"""Reader graphs in the whole service: the permissions leak matrix of test_permissions.py holds when
every principal of its corpus has a graph of its own and every search walks (no exact-scan limit), so
each search runs as the parts ``engines.principal_graphs.split`` gives; and ``manage.py reader_graph``
builds (CONCURRENTLY, outside a transaction), lists and drops them."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from engines import principal_graphs, registry
from engines.hnsw_parameters import BuildParameters
from engines.pgvector_index import PgVectorIndex
from knowledge.models import Chunk
from tests.engines.pgvector_rows import CHUNKS
from tests.retrieval.test_permissions import (
    corpus,  # noqa: F401 (the leak matrix's corpus)
    leak_matrix,
)

PRINCIPALS = ("*", "group:hr", "user:alice", "user:bob")


@pytest.mark.slow
@pytest.mark.django_db
def test_the_leak_matrix_holds_when_every_principal_has_a_graph(corpus, settings, monkeypatch):  # noqa: F811
    tenant, _ = corpus
    split_searches = []
    by_parts = PgVectorIndex._search_reader_graphs
    monkeypatch.setattr(
        PgVectorIndex, "_search_reader_graphs", lambda *a, **k: split_searches.append(a[5]) or by_parts(*a, **k)
    )
    settings.VECTOR_EXACT_SCAN_THRESHOLD = 0  # every search with a matching row walks
    settings.SEARCH_CACHE_TTL_S = 0
    registry.clear()
    try:
        dimensions = set(Chunk.objects.filter(tenant_id=tenant.pk).values_list("embedding_dim", flat=True))
        for principal in PRINCIPALS:
            for dimension in dimensions:
                principal_graphs.create(
                    CHUNKS, tenant.pk, principal, dimension, BuildParameters(16, 64), concurrently=False
                )
        assert len(principal_graphs.listed(CHUNKS)) == len(PRINCIPALS) * len(dimensions)
        assert leak_matrix(corpus) == 6 * 2 * 5 * 3 * 2
        assert {principal for graphed in split_searches for principal in graphed} == set(PRINCIPALS)
    finally:
        registry.clear()
        principal_graphs._graphed.cache_clear()


@pytest.mark.django_db(transaction=True)
def test_the_command_builds_lists_and_drops_a_principals_graph(corpus):  # noqa: F811
    tenant, _ = corpus
    out = io.StringIO()
    call_command("reader_graph", tenant=tenant.pk, principal="group:hr", stdout=out)
    (graph,) = principal_graphs.listed(CHUNKS)
    assert (graph.tenant_id, graph.principal, graph.valid) == (tenant.pk, "group:hr", True)
    rows = Chunk.objects.filter(tenant_id=tenant.pk, acl__overlap=["group:hr"]).count()
    assert f"dimension {graph.dimension}: {rows} chunks" in out.getvalue() and rows > 0
    listing = io.StringIO()
    call_command("reader_graph", stdout=listing)
    assert f"tenant {tenant.pk} group:hr dimension {graph.dimension}: about" in listing.getvalue()
    call_command("reader_graph", tenant=tenant.pk, principal="group:hr", drop=True, stdout=io.StringIO())
    assert principal_graphs.listed(CHUNKS) == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tenant": 1}, "--tenant and --principal go together"),
        ({"tenant": 10**9, "principal": "group:hr"}, "no tenant"),
        ({"principal": "group:nobody", "tenant": None}, "--tenant and --principal go together"),
    ],
)
def test_the_command_refuses_what_it_cannot_build(options, message):
    with pytest.raises(CommandError, match=message):
        call_command("reader_graph", **options, stdout=io.StringIO())


@pytest.mark.django_db
def test_a_principal_no_chunk_names_gets_no_graph(corpus):  # noqa: F811
    tenant, _ = corpus
    with pytest.raises(CommandError, match="no chunk of tenant"):
        call_command("reader_graph", tenant=tenant.pk, principal="group:nobody", stdout=io.StringIO())
    with pytest.raises(CommandError, match="has no graph"):
        call_command("reader_graph", tenant=tenant.pk, principal="group:nobody", drop=True, stdout=io.StringIO())


@pytest.mark.django_db
def test_no_graph_is_built_when_milvus_walks_the_vectors(corpus, settings):  # noqa: F811
    tenant, _ = corpus
    settings.VECTOR_BACKEND = "milvus"
    registry.clear()
    try:
        with pytest.raises(CommandError, match="VECTOR_BACKEND=milvus"):
            call_command("reader_graph", tenant=tenant.pk, principal="group:hr", stdout=io.StringIO())
    finally:
        registry.clear()
    assert principal_graphs.listed(CHUNKS) == []
