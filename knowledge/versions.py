"""Versions of a knowledge base (blue-green): build one beside the active version, validate it,
activate it (the previous one is retired, so activating that again is the rollback), retire, purge.
Each step tells the three stores through their protocols (``build_version``, ``switch_version``,
``drop_version``: ``engines.base``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Case, Count, F, Max, Q, Value, When
from django.utils import timezone

from core.cost import charged_to
from core.replicas import record_write
from core.usage import frequent_queries
from engines.base import SearchScope, SqlFilter
from engines.embedders import get_embedder
from knowledge.chunking import DEFAULT_CHILD_TOKENS, DEFAULT_PARENT_TOKENS
from knowledge.errors import InvalidChunking, VersionConflict
from knowledge.ingestion.files import Labels, stored_sources, task_file
from knowledge.ingestion.pipeline import Ingester
from knowledge.models import PARENT_CHILD, PLAIN, Chunk, Document, KnowledgeBase, KnowledgeBaseVersion, KnowledgeTask
from knowledge.queue import queue_task
from knowledge.selectors.search import analyzer_for_tenant
from knowledge.stores import graph_store, lexical_index, vector_index

BUILD_TASK = "knowledge.tasks.build_version"


def index_settings(
    embedding_model: str | None,
    chunk_size: int | None,
    chunk_overlap: int | None,
    languages: list[str] | None,
    chunking: str | None = None,
    parent_chunk_size: int | None = None,
) -> dict[str, Any]:
    """Model, dimension, chunking (capped for the model) and languages of a KB or version; omitted
    values take the service defaults (``parent_child``: ``chunk_size`` is the children's, 128 tokens
    by default, and parents take at most ``parent_chunk_size``, 512). Loads the model:
    ``EmbeddingError`` for an unusable one; ``InvalidChunking`` for a chunking it cannot build."""
    chunking = chunking or PLAIN
    parent = check_chunking(chunking, chunk_size, parent_chunk_size)
    embedder = get_embedder(embedding_model)
    default_size = DEFAULT_CHILD_TOKENS if chunking == PARENT_CHILD else settings.CHUNK_SIZE_TOKENS
    size = min(chunk_size or default_size, embedder.max_tokens)
    return {
        "embedding_model": embedder.model_name,
        "embedding_dim": embedder.dimension,
        "chunk_size": size,
        "chunk_overlap": min(settings.CHUNK_OVERLAP_TOKENS if chunk_overlap is None else chunk_overlap, size // 2),
        "chunking": chunking,
        "parent_chunk_size": parent,
        "languages": list(embedder.languages) if languages is None else languages,
    }


def check_chunking(chunking: str, chunk_size: int | None, parent_chunk_size: int | None) -> int | None:
    """A parent_child version's parent size (checked against its children's), None for plain chunks;
    ``InvalidChunking`` for an unknown chunking, children larger than parents, or parents of plain chunks."""
    if chunking not in (PLAIN, PARENT_CHILD):
        raise InvalidChunking(f"unknown chunking {chunking!r}; use {PLAIN} or {PARENT_CHILD}")
    if chunking == PLAIN:
        if parent_chunk_size is not None:
            raise InvalidChunking(f"parent_chunk_size applies to chunking {PARENT_CHILD} only")
        return None
    parent = parent_chunk_size or DEFAULT_PARENT_TOKENS
    child = chunk_size or DEFAULT_CHILD_TOKENS
    if child > parent:
        raise InvalidChunking(
            f"chunk_size ({child}) is the children's size under {PARENT_CHILD}: it must not exceed "
            f"parent_chunk_size ({parent})",
            details={"chunk_size": child, "parent_chunk_size": parent},
        )
    return parent


VERSION_SETTINGS = (
    "embedding_model", "embedding_dim", "chunk_size", "chunk_overlap", "chunking", "parent_chunk_size", "languages",
)  # fmt: skip


def activate_first_version(kb: KnowledgeBase) -> KnowledgeBaseVersion:
    """Version 1, empty and active, with the KB's settings and the vector index its dimension needs."""
    version = KnowledgeBaseVersion.objects.create(
        knowledge_base=kb,
        number=1,
        status=KnowledgeBaseVersion.Status.ACTIVE,
        activated_at=timezone.now(),
        **{name: getattr(kb, name) for name in VERSION_SETTINGS},
    )
    kb.active_version = version
    kb.save(update_fields=["active_version"])
    vector_index().build_version(version.pk, dimension=kb.embedding_dim)
    return version


GATED = "gated"  # activate: switch once the version measures no worse than the active one
GATE_TASK = "retrieval.tasks.gate_version"  # the search side's comparison (retrieval.evaluation.gate)


def start_version_build(
    kb: KnowledgeBase,
    *,
    activate: bool | str,
    embedding_model: str | None = None,
    chunk_size: int | None = None,
    chunk_overlap: int | None = None,
    languages: list[str] | None = None,
    chunking: str | None = None,
    parent_chunk_size: int | None = None,
) -> tuple[KnowledgeBaseVersion, KnowledgeTask]:
    """A new version (settings omitted: the active version's; languages: the new model's when the model
    changes; sizes: the new chunking's defaults when the chunking changes), built by a task from the
    stored originals while searches keep reading the active version; ``activate``: switch to it once it
    validates (``GATED``: once it also measures no worse on the KB's query set). One version builds at a time."""
    active = kb.require_active_version()
    if embedding_model is None:
        embedding_model, languages = active.embedding_model, active.languages if languages is None else languages
    if chunking is None or chunking == active.chunking:
        chunking, chunk_size = active.chunking, chunk_size or active.chunk_size
        if chunking == PARENT_CHILD:
            parent_chunk_size = parent_chunk_size or active.parent_chunk_size
    index = index_settings(
        embedding_model,
        chunk_size,
        active.chunk_overlap if chunk_overlap is None else chunk_overlap,
        languages,
        chunking,
        parent_chunk_size,
    )
    with transaction.atomic():
        KnowledgeBase.objects.select_for_update().filter(pk=kb.pk).first()  # version numbers one at a time
        building = kb.versions.filter(status=KnowledgeBaseVersion.Status.BUILDING).first()
        if building is not None:
            raise VersionConflict(f"version {building.number} is still building")
        number = (kb.versions.aggregate(Max("number"))["number__max"] or 0) + 1
        # Settings measured on the active version carry over while the model and chunking do.
        same_index = (index["embedding_model"], index["chunking"]) == (active.embedding_model, active.chunking)
        search_settings = active.search_settings if same_index else {}
        version = KnowledgeBaseVersion.objects.create(
            knowledge_base=kb, number=number, search_settings=search_settings, **index
        )
        vector_index().build_version(version.pk, dimension=version.embedding_dim)
        task = queue_task(kb, KnowledgeTask.Kind.BUILD_VERSION, BUILD_TASK, (version.pk, activate))
    return version, task


def version_build_files(version: KnowledgeBaseVersion) -> list[dict[str, Any]]:
    """What a build re-ingests: every ready document of the KB, from its stored original and labels."""
    documents = Document.objects.filter(knowledge_base_id=version.knowledge_base_id, status=Document.Status.READY)
    return [
        task_file(doc.source_uri, doc.original, Labels(title=doc.title, tags=doc.tags, metadata=doc.metadata, acl=None))
        for doc in documents.exclude(original="").order_by("pk")
    ]


def fill_version(
    version: KnowledgeBaseVersion, files: list[dict[str, Any]], *, on_progress: Callable[[int], None]
) -> KnowledgeBaseVersion:
    """Fill a building version (re-parse, re-chunk, re-embed, new keyword index), then validate it:
    ``ready`` when every ready document of the KB has chunks in it and a sample of the tenant's recent
    queries is answered by it without error, else ``failed`` naming what is missing or failed."""
    kb = KnowledgeBase.objects.select_related("active_version").get(pk=version.knowledge_base_id)
    with charged_to(kb.tenant_id):  # the build and its validation queries (core.cost)
        return _fill_version(kb, version, files, on_progress)


def _fill_version(
    kb: KnowledgeBase, version: KnowledgeBaseVersion, files: list[dict[str, Any]], on_progress: Callable[[int], None]
) -> KnowledgeBaseVersion:
    with stored_sources(files) as sources:
        report = Ingester(kb, version=version, on_progress=on_progress, raise_embedding_errors=True).ingest(sources)
    missing = list(
        Document.objects.filter(knowledge_base=kb, status=Document.Status.READY)
        .exclude(pk__in=Chunk.objects.filter(kb_version=version).values("document_id"))
        .order_by("source_uri")
        .values_list("source_uri", flat=True)
    )
    reasons = dict(report.failures)
    version.error = "; ".join(f"{uri}: {reasons.get(uri, 'no stored original')}" for uri in missing[:20])
    if not missing:
        version.error = _sample_queries_failure(kb, version)
    version.status = KnowledgeBaseVersion.Status.FAILED if version.error else KnowledgeBaseVersion.Status.READY
    version.finished_at = timezone.now()
    version.save(update_fields=["status", "error", "finished_at"])
    return version


# A new version must answer this many of the tenant's most frequent recent queries (core.usage) before it is ready.
VALIDATION_QUERIES = 20


def _sample_queries_failure(kb: KnowledgeBase, version: KnowledgeBaseVersion) -> str:
    """Each sampled query through both legs of the new version (its model embeds the query for its
    vectors; its keyword index takes the analyzed tokens): '' when all answer, else why the first failed."""
    queries = frequent_queries(kb.tenant_id, VALIDATION_QUERIES)
    if not queries:
        return ""
    embedder, analyzer = get_embedder(version.embedding_model), analyzer_for_tenant(kb.tenant_id)
    scope = SearchScope(kb.tenant_id, (version.pk,), version.embedding_dim)
    for query in queries:
        try:
            vector_index().search(scope, embedder.embed_query(query), 10, SqlFilter())
            lexical_index().search(version.pk, kb.tenant_id, analyzer.tokens(query), 10, None)
        except Exception as exc:  # any failure of the new version keeps it from searches
            return f"the recent query {query!r} failed on this version: {type(exc).__name__}: {exc}"
    return ""


def fail_version(version_id: int, reason: str) -> None:
    """A build that gave up: its version is ``failed`` (never activated), with the reason."""
    KnowledgeBaseVersion.objects.filter(pk=version_id, status=KnowledgeBaseVersion.Status.BUILDING).update(
        status=KnowledgeBaseVersion.Status.FAILED, error=reason, finished_at=timezone.now()
    )


def activate_version(version: KnowledgeBaseVersion) -> KnowledgeBaseVersion:
    """Switch the KB's searches to ``version`` in one transaction: the active one is retired (kept, so
    activating it again is the rollback: instant, nothing re-embedded). The KB takes the version's
    model and chunking; both versions' revisions move on, so no cached answer of either is reused."""
    with transaction.atomic():
        kb = KnowledgeBase.objects.select_for_update().get(pk=version.knowledge_base_id)
        version = KnowledgeBaseVersion.objects.select_for_update().get(pk=version.pk)
        if version.pk == kb.active_version_id:
            return version
        if version.status not in (KnowledgeBaseVersion.Status.READY, KnowledgeBaseVersion.Status.RETIRED):
            raise VersionConflict(
                f"version {version.number} is {version.status}: only a ready or retired one can be activated"
            )
        previous_id = kb.active_version_id
        _switch_versions(previous_id, version)
        vector_index().switch_version(previous_id, version.pk)
        lexical_index().switch_version(previous_id, version.pk)
        graph_store().switch_version(kb.tenant_id, previous_id, version.pk)
        for name in VERSION_SETTINGS:
            setattr(kb, name, getattr(version, name))
        kb.active_version = version
        kb.save(update_fields=[*VERSION_SETTINGS, "active_version"])
        _count_chunks_of(kb, version)
        record_write(kb.tenant_id)  # searches read the switch on the primary until a replica has it
    return version


def _switch_versions(previous_id: int | None, version: KnowledgeBaseVersion) -> None:
    """In one statement (each is a round trip inside the switch's transaction): ``version`` active, the
    previous one retired, both revisions moved on."""
    now, active = timezone.now(), KnowledgeBaseVersion.Status.ACTIVE
    this = Q(pk=version.pk)
    KnowledgeBaseVersion.objects.filter(pk__in=[previous_id, version.pk]).update(
        status=Case(When(this, then=Value(active)), default=Value(KnowledgeBaseVersion.Status.RETIRED)),
        activated_at=Case(When(this, then=Value(now)), default=F("activated_at")),
        retired_at=Case(When(this, then=F("retired_at")), default=Value(now)),
        revision=F("revision") + 1,
    )
    version.status, version.activated_at, version.revision = active, now, version.revision + 1


def _count_chunks_of(kb: KnowledgeBase, version: KnowledgeBaseVersion) -> None:
    """Set each document's chunk count to what ``version`` holds of it, writing only the rows whose
    count changes. Counted in one pass, compared here and written by id: plans that do not depend on
    statistics, which a version just built has not got yet (a correlated count or a joined UPDATE is
    planned as nested loops over the fresh rows, and takes seconds inside the switch's transaction)."""
    held = dict(
        Chunk.objects.filter(kb_version=version)
        .order_by()
        .values("document_id")
        .annotate(n=Count("id"))
        .values_list("document_id", "n")
    )
    changed = [
        (document_id, held.get(document_id, 0))
        for document_id, count in Document.objects.filter(knowledge_base=kb).values_list("id", "chunk_count")
        if count != held.get(document_id, 0)
    ]
    if changed:
        ids, counts = zip(*changed)
        with connection.cursor() as cursor:
            cursor.execute(_SET_CHUNK_COUNTS_SQL, [list(ids), list(counts)])


_SET_CHUNK_COUNTS_SQL = (
    f"UPDATE {Document._meta.db_table} AS d SET chunk_count = v.n "
    "FROM unnest(%s::bigint[], %s::integer[]) AS v(id, n) WHERE d.id = v.id"
)


def retire_version(version: KnowledgeBaseVersion) -> KnowledgeBaseVersion:
    """Set aside a ready version that will not be activated: it is purged KB_VERSION_RETENTION_DAYS
    later and can be activated until then. The active version is retired only by activating another;
    a building one cannot be stopped."""
    with transaction.atomic():
        version = KnowledgeBaseVersion.objects.select_for_update().get(pk=version.pk)
        if version.status == KnowledgeBaseVersion.Status.RETIRED:
            return version
        if version.status != KnowledgeBaseVersion.Status.READY:
            hint = {"active": ": activate another version instead"}.get(version.status, "")
            raise VersionConflict(
                f"version {version.number} is {version.status}: only a ready one can be retired{hint}"
            )
        version.status, version.retired_at = KnowledgeBaseVersion.Status.RETIRED, timezone.now()
        version.save(update_fields=["status", "retired_at"])
    return version


def purge_old_versions(retention_days: int) -> int:
    """Delete versions retired, or failed, more than ``retention_days`` ago: their chunks and keyword
    index go with them (no rollback to them any more). Returns how many were purged."""
    cutoff = timezone.now() - timedelta(days=retention_days)
    old = KnowledgeBaseVersion.objects.filter(
        Q(status=KnowledgeBaseVersion.Status.RETIRED, retired_at__lt=cutoff)
        | Q(status=KnowledgeBaseVersion.Status.FAILED, finished_at__lt=cutoff)
    )
    purged = 0
    for version in old.select_related("knowledge_base"):
        with transaction.atomic():
            lexical_index().drop_version(version.pk)
            graph_store().drop_version(version.knowledge_base.tenant_id, version.pk)
            vector_index().drop_version(version.pk)
            version.delete()  # its chunks cascade
        purged += 1
    return purged
