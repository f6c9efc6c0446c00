"""Contract of the vector indexes (``engines.base.VectorIndex``), run once per implementation in the
registry (``engines.registry.VECTOR_INDEXES``): what ``write`` adds ``search`` and ``similarities`` find,
``delete`` and ``drop_version`` forget (with the domain's rows: pgvector keeps vectors in them), a
version's index is built once per dimension, a switch leaves every version searchable, and a plan
changes no answer. pgvector's own choices (exact scan or graph walk, filters): test_pgvector_index.py."""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import pytest
from django.test import override_settings

from engines.base import ChunkRow, SearchScope, VectorIndex
from engines.registry import VECTOR_INDEXES
from knowledge.models import Chunk, KnowledgeBaseVersion
from knowledge.stores import store_tables
from retrieval.filters import compile_filters
from tests.factories import DIMENSION, DocumentFactory, KnowledgeBaseFactory, unit_vector

pytestmark = pytest.mark.django_db

NO_FILTER = compile_filters(None).sql


_built: dict[str, VectorIndex] = {}  # one per run: Milvus Lite starts once


@pytest.fixture(params=[backend.name for backend in VECTOR_INDEXES])
def index(request) -> VectorIndex:
    if request.param not in _built:
        (backend,) = [backend for backend in VECTOR_INDEXES if backend.name == request.param]
        # Milvus with no exact-scan limit: it answers every search with a matching row (none scanned in SQL)
        walk_only = override_settings(VECTOR_EXACT_SCAN_THRESHOLD=0) if request.param == "milvus" else nullcontext()
        with walk_only:
            _built[request.param] = backend.build(store_tables())
    return _built[request.param]


def rows_of(document, version: KnowledgeBaseVersion, vectors: list[np.ndarray]) -> list[ChunkRow]:
    kb = document.knowledge_base
    return [
        ChunkRow(
            document_id=document.pk, version_id=version.pk, tenant_id=kb.tenant_id, knowledge_base_id=kb.pk,
            ordinal=ordinal, content=f"passage {ordinal}", content_hash=f"hash-{ordinal}", token_count=2,
            embedding=vector, doc_type=document.doc_type, created_at=document.created_at, tags=["t"],
            metadata={"n": ordinal}, acl=[],
        )
        for ordinal, vector in enumerate(vectors)
    ]  # fmt: skip


def written(index: VectorIndex, version: KnowledgeBaseVersion, vectors: list[np.ndarray]) -> list[int]:
    """The ids of passages written for ``vectors`` into ``version`` of a fresh document, in order."""
    document = DocumentFactory(knowledge_base=version.knowledge_base)
    index.write(rows_of(document, version, vectors))
    return list(
        Chunk.objects.filter(document=document, kb_version=version).order_by("ordinal").values_list("pk", flat=True)
    )


def scope(version: KnowledgeBaseVersion, *more: KnowledgeBaseVersion) -> SearchScope:
    ids = (version.pk, *(other.pk for other in more))
    return SearchScope(version.knowledge_base.tenant_id, ids, DIMENSION)


def nearest(index: VectorIndex, version_scope: SearchScope, query: np.ndarray, top_k: int = 10) -> list[int]:
    return [hit.chunk_id for hit in index.search(version_scope, query, top_k, NO_FILTER)]


def vectors(*seeds: int) -> list[np.ndarray]:
    return [unit_vector(20_000_000 + seed) for seed in seeds]  # far from the factories' seeds


def test_written_passages_are_found_nearest_first_with_their_cosine(index):
    version = KnowledgeBaseFactory().active_version
    index.build_version(version.pk, dimension=DIMENSION)
    given = vectors(1, 2, 3)
    ids = written(index, version, given)
    hits = index.search(scope(version), given[1], 3, NO_FILTER)
    assert hits[0].chunk_id == ids[1] and hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert sorted(hit.chunk_id for hit in hits) == sorted(ids)
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
    cosines = {hit.chunk_id: hit.score for hit in index.similarities(scope(version), given[0], [ids[0], ids[2]])}
    assert cosines[ids[0]] == pytest.approx(1.0, abs=1e-5)
    assert cosines[ids[2]] == pytest.approx(float(np.dot(given[0], given[2])), abs=1e-3)


def test_a_plan_changes_no_answer(index):
    version = KnowledgeBaseFactory().active_version
    index.build_version(version.pk, dimension=DIMENSION)
    given = vectors(4, 5, 6, 7)
    written(index, version, given)
    plan = index.plan(scope(version), NO_FILTER)
    with_plan = index.search(scope(version), given[2], 4, NO_FILTER, plan)
    assert [hit.chunk_id for hit in with_plan] == nearest(index, scope(version), given[2], 4)


def test_deleted_passages_are_not_found(index):
    version = KnowledgeBaseFactory().active_version
    index.build_version(version.pk, dimension=DIMENSION)
    given = vectors(8, 9)
    gone, kept = written(index, version, given)
    index.delete(version.pk, [gone])
    Chunk.objects.filter(pk=gone).delete()  # the domain's row (pgvector's vector lives in it)
    assert nearest(index, scope(version), given[0]) == [kept]
    assert [hit.chunk_id for hit in index.similarities(scope(version), given[0], [gone, kept])] == [kept]


def test_building_a_version_twice_changes_nothing(index):
    version = KnowledgeBaseFactory().active_version
    index.build_version(version.pk, dimension=DIMENSION)
    given = vectors(10)
    ids = written(index, version, given)
    index.build_version(version.pk, dimension=DIMENSION)
    assert nearest(index, scope(version), given[0]) == ids


def test_a_switch_leaves_both_versions_searchable_by_scope(index):
    kb = KnowledgeBaseFactory()
    previous = kb.active_version
    following = KnowledgeBaseVersion.objects.create(
        knowledge_base=kb,
        number=2,
        embedding_model=previous.embedding_model,
        embedding_dim=DIMENSION,
        chunk_size=kb.chunk_size,
        chunk_overlap=0,
    )
    index.build_version(following.pk, dimension=DIMENSION)
    given = vectors(11)
    old, new = written(index, previous, given), written(index, following, given)
    index.switch_version(previous.pk, following.pk)
    assert nearest(index, scope(following), given[0]) == new
    assert nearest(index, scope(previous), given[0]) == old  # a rollback needs nothing rebuilt
    assert sorted(nearest(index, scope(previous, following), given[0])) == sorted(old + new)


def test_a_dropped_version_is_not_found_and_others_stay(index):
    kb, other = KnowledgeBaseFactory(), KnowledgeBaseFactory()
    index.build_version(kb.active_version_id, dimension=DIMENSION)
    given = vectors(12)
    written(index, kb.active_version, given)
    theirs = written(index, other.active_version, given)
    index.drop_version(kb.active_version_id)
    Chunk.objects.filter(kb_version=kb.active_version).delete()  # the domain's rows go with the version
    assert nearest(index, scope(kb.active_version), given[0]) == []
    assert nearest(index, scope(other.active_version), given[0]) == theirs
    index.drop_version(kb.active_version_id)  # again: nothing left to drop, no error
