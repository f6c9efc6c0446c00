"""Reads for knowledge bases."""

from __future__ import annotations

import json
import threading
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from cachetools import TTLCache
from celery.result import AsyncResult
from django.db.models import Count, Q, QuerySet

from core.cost import tenant_costs
from core.usage import query_counts
from engines.database import read_connection
from knowledge.errors import DocumentNotFound, KnowledgeBaseNotFound, SourceNotFound, TaskNotFound, VersionNotFound
from knowledge.models import (
    PLAIN,
    Chunk,
    DictionaryTerm,
    Document,
    KnowledgeBase,
    KnowledgeBaseVersion,
    KnowledgeSource,
    KnowledgeTask,
    SourceRun,
    Synonym,
)
from knowledge.search_settings import merged_search_settings
from tenants.models import Tenant

if TYPE_CHECKING:
    from engines.analysis import Analyzer


@dataclass(frozen=True)
class SearchedVersion:
    """The active version of one KB a search covers, with what the search needs of it and of its KB."""

    kb_id: int
    version_id: int
    revision: int
    embedding_model: str
    embedding_dim: int
    languages: tuple[str, ...]  # the KB's
    search_settings: dict[str, Any]  # the KB's merged with its version's, key by key
    chunking: str = PLAIN  # parent_child: its hits are child chunks, returned as their parent passages
    graph_extractor: str = ""  # the extractor that built its graph (``graph.query_setup.graph_setup_of``)


@dataclass(frozen=True)
class SearchedKnowledge:
    """What a search reads before it searches, in one round trip: its versions (in the KBs' order, by
    name) and the stamp of the tenant's synonyms and protected terms (:func:`tenant_vocabulary`'s key).
    A cached answer depends on exactly this."""

    versions: tuple[SearchedVersion, ...]
    vocabulary_stamp: int


def searched_knowledge(
    tenant: Tenant, kb_ids: list[int] | None = None, reachable: Collection[int] | None = None
) -> SearchedKnowledge:
    """The tenant's KBs with an active version that a search covers (all of them when ``kb_ids`` is
    empty). A KB id of another tenant, or outside ``reachable`` (a KB-limited key's KBs; None: all),
    is reported exactly like one that does not exist."""
    # Raw SQL: this runs on every search and every cached answer, where compiling the ORM query cost
    # more than running it.
    with read_connection().cursor() as cursor:  # a search's reads: maybe a replica's
        ids = sorted(set(kb_ids)) if kb_ids else None
        cursor.execute(_SEARCHED_KNOWLEDGE_SQL, [ids, ids, tenant.pk])
        return _searched_knowledge_of(_reachable_rows(cursor.fetchall(), reachable), kb_ids)


def searched_knowledge_statement(tenant_id: int) -> tuple[str, list[int | None]]:
    """:func:`searched_knowledge`'s query over all the tenant's KBs, for another app to send in its
    round trip (the API key's check: ``tenants.selectors.ReadAlong``); :func:`searched_knowledge_in`
    reads its rows."""
    return _SEARCHED_KNOWLEDGE_SQL, [None, None, tenant_id]


def searched_knowledge_in(
    rows: list[tuple[Any, ...]], kb_ids: list[int] | None, reachable: Collection[int] | None = None
) -> SearchedKnowledge:
    """:func:`searched_knowledge` from the rows of :func:`searched_knowledge_statement`, narrowed to ``kb_ids``
    (and to ``reachable``)."""
    wanted = set(kb_ids or ())
    rows = _reachable_rows(rows, reachable)
    return _searched_knowledge_of([row for row in rows if not wanted or row[1] in wanted], kb_ids)


def _reachable_rows(rows: list[tuple[Any, ...]], reachable: Collection[int] | None) -> list[tuple[Any, ...]]:
    """The rows of the KBs a key may reach; with none left, the vocabulary stamp's row of NULLs."""
    if reachable is None:
        return rows
    kept = [row for row in rows if row[1] in reachable]
    return kept or [(rows[0][0], *([None] * (len(rows[0]) - 1)))] if rows else kept


def _searched_knowledge_of(rows: list[tuple[Any, ...]], kb_ids: list[int] | None) -> SearchedKnowledge:
    versions = tuple(
        SearchedVersion(
            kb_id, version_id, revision, model, dim, tuple(languages),
            merged_search_settings(json.loads(kb_settings), json.loads(version_settings)),  # jsonb read as text
            chunking, graph_extractor,
        )
        for (_, kb_id, version_id, revision, model, dim, languages, kb_settings, version_settings, chunking,
             graph_extractor) in rows
        if kb_id is not None
    )  # fmt: skip
    _check_found(kb_ids, {version.kb_id for version in versions})
    return SearchedKnowledge(versions, rows[0][0] if rows else 0)


def restricted_versions(versions: Iterable[tuple[int, int]]) -> frozenset[int]:
    """Of ``versions`` (id, revision), those holding a chunk not open to everyone (``*``): a search of the
    others needs no ACL check, since every reader holds ``*``. Read through a small partial index and
    remembered per revision (an ACL write bumps it). Any failure raises: the caller refuses the search."""
    revisions = dict(versions)
    with _restricted_lock:
        known = {version_id: _restricted.get((version_id, revision)) for version_id, revision in revisions.items()}
    unknown = [version_id for version_id, restricted in known.items() if restricted is None]
    if unknown:
        with read_connection().cursor() as cursor:
            cursor.execute(_RESTRICTED_SQL, [unknown])
            found = {row[0] for row in cursor.fetchall()}
        with _restricted_lock:
            for version_id in unknown:
                known[version_id] = _restricted[(version_id, revisions[version_id])] = version_id in found
    return frozenset(version_id for version_id, restricted in known.items() if restricted)


def forget_restricted_versions() -> None:
    """Drop what this process remembers of restricted versions (tests, whose transactions roll back)."""
    with _restricted_lock:
        _restricted.clear()


# The predicate of the partial index chunk_version_restricted, word for word (the planner proves it).
_RESTRICTED_SQL = (
    f"SELECT v FROM unnest(%s::bigint[]) v WHERE EXISTS (SELECT 1 FROM {Chunk._meta.db_table} c "
    "WHERE c.kb_version_id = v AND NOT (c.acl @> ARRAY['*']::varchar(200)[]))"
)
_restricted: TTLCache[tuple[int, int], bool] = TTLCache(maxsize=10_000, ttl=3600)
_restricted_lock = threading.Lock()


def search_settings_of(kb: KnowledgeBase) -> dict[str, Any]:
    """The KB's search settings with its active version's over them, key by key."""
    return merged_search_settings(kb.search_settings, kb.require_active_version().search_settings)


# One row per KB searched, or one row of NULLs after the tenant's vocabulary stamp when none is.
_SEARCHED_KNOWLEDGE_SQL = (
    "SELECT t.vocabulary_stamp, kb.id, v.id, v.revision, v.embedding_model, v.embedding_dim, kb.languages, "
    f"kb.search_settings, v.search_settings, v.chunking, v.graph_extractor FROM {Tenant._meta.db_table} t "
    f"LEFT JOIN ({KnowledgeBase._meta.db_table} kb JOIN {KnowledgeBaseVersion._meta.db_table} v "
    "ON v.id = kb.active_version_id) "
    "ON kb.tenant_id = t.id AND (%s::bigint[] IS NULL OR kb.id = ANY(%s::bigint[])) "
    "WHERE t.id = %s ORDER BY kb.name"
)


def _check_found(kb_ids: list[int] | None, found: set[int]) -> None:
    missing = sorted(set(kb_ids or ()) - found)
    if missing:
        raise KnowledgeBaseNotFound(
            f"unknown knowledge base id(s): {', '.join(map(str, missing))}", details={"kb_ids": missing}
        )


def knowledge_bases_of(
    tenant: Tenant, reachable: Collection[int] | None = None, reader: tuple[str, ...] | None = None
) -> QuerySet[KnowledgeBase]:
    """The tenant's KBs with their active version and document count (``GET /api/v1/knowledge-bases``);
    ``reachable``: a KB-limited key's (None: all); ``reader``: count only the documents it may read."""
    kbs = KnowledgeBase.objects.filter(tenant=tenant)
    if reachable is not None:
        kbs = kbs.filter(pk__in=list(reachable))
    counted = None if reader is None else readable_by(reader, prefix="documents__")
    return (
        kbs.select_related("active_version")
        .annotate(document_count=Count("documents", filter=counted))
        .order_by("name")
    )


def knowledge_base_of(
    tenant: Tenant, kb_id: int, reachable: Collection[int] | None = None, reader: tuple[str, ...] | None = None
) -> KnowledgeBase:
    """One of the tenant's KBs; another tenant's, or one outside ``reachable``, is reported exactly like
    one that does not exist."""
    kb = knowledge_bases_of(tenant, reachable, reader).filter(pk=kb_id).first()
    if kb is None:
        raise KnowledgeBaseNotFound(f"unknown knowledge base id: {kb_id}", details={"kb_ids": [kb_id]})
    return kb


def document_counts_by_status(kb_ids: list[int]) -> dict[int, dict[str, int]]:
    """KB id -> document status -> how many (the OpenAI-compatible vector stores' ``file_counts``)."""
    rows = (
        Document.objects.filter(knowledge_base_id__in=kb_ids)
        .order_by()
        .values("knowledge_base_id", "status")
        .annotate(n=Count("id"))
    )
    counts: dict[int, dict[str, int]] = {}
    for row in rows:
        counts.setdefault(row["knowledge_base_id"], {})[row["status"]] = row["n"]
    return counts


def readable_by(reader: tuple[str, ...], prefix: str = "") -> Q:
    """Documents ``reader`` may read: their ACL shares one of its principals, or they set none and their
    KB's default does (docs/permissions.md)."""
    return Q(**{f"{prefix}acl__overlap": list(reader)}) | Q(
        **{f"{prefix}acl": [], f"{prefix}knowledge_base__default_acl__overlap": list(reader)}
    )


def documents_of(kb: KnowledgeBase, reader: tuple[str, ...] | None = None) -> QuerySet[Document]:
    """The KB's documents; with a ``reader``, only those it may read (the others are as absent)."""
    documents = Document.objects.filter(knowledge_base=kb, tenant_id=kb.tenant_id)
    if reader is not None:
        documents = documents.filter(readable_by(reader))
    return documents.order_by("source_uri", "id")


def document_of(kb: KnowledgeBase, document_id: int, reader: tuple[str, ...] | None = None) -> Document:
    document = documents_of(kb, reader).filter(pk=document_id).first()
    if document is None:
        raise DocumentNotFound(f"knowledge base {kb.pk} has no document {document_id}")
    return document


def document_of_tenant(
    tenant: Tenant,
    document_id: int,
    reachable: Collection[int] | None = None,
    reader: tuple[str, ...] | None = None,
) -> Document:
    """A tenant's document by id alone (in any of its KBs); another tenant's, a removed one, one outside
    ``reachable`` KBs or one ``reader`` may not read is missing."""
    documents = Document.objects.filter(tenant=tenant, pk=document_id).exclude(status=Document.Status.REMOVED)
    if reachable is not None:
        documents = documents.filter(knowledge_base_id__in=list(reachable))
    if reader is not None:
        documents = documents.filter(readable_by(reader))
    document = documents.first()
    if document is None:
        raise DocumentNotFound(f"no document {document_id}")
    return document


RUNS_SHOWN = 5


def active_knowledge_bases(*, name: str | None = None, tenant_name: str | None = None) -> QuerySet[KnowledgeBase]:
    """The KBs with an active version, of one name and / or one tenant when given: what the maintenance
    commands (``rebuild_lexical_index``, ``graph_communities``) work on."""
    kbs = KnowledgeBase.objects.filter(active_version__isnull=False).select_related("active_version", "tenant")
    if name:
        kbs = kbs.filter(name=name)
    if tenant_name:
        kbs = kbs.filter(tenant__name=tenant_name)
    return kbs


def sources_of(kb: KnowledgeBase) -> QuerySet[KnowledgeSource]:
    """A KB's sources with their schedule."""
    return _sources_with_schedule(KnowledgeSource.objects.filter(knowledge_base=kb))


def _sources_with_schedule(sources: QuerySet[KnowledgeSource]) -> QuerySet[KnowledgeSource]:
    """Sources with their schedule and document count read in the same query, oldest first."""
    return (
        sources.select_related("periodic_task__interval", "periodic_task__crontab")
        .annotate(document_count=Count("documents"))
        .order_by("id")
    )


def latest_runs(source: KnowledgeSource, count: int = RUNS_SHOWN) -> list[SourceRun]:
    return list(source.runs.order_by("-started_at", "-id")[:count])


def source_of(kb: KnowledgeBase, source_id: int) -> KnowledgeSource:
    source = sources_of(kb).filter(pk=source_id).first()
    if source is None:
        raise SourceNotFound(f"knowledge base {kb.pk} has no source {source_id}")
    return source


def source_schedule(source: KnowledgeSource) -> dict[str, Any]:
    """``{"interval_seconds": n}`` or ``{"crontab": "m h dom mon dow"}``, as the API takes it."""
    task = source.periodic_task
    if task is None:
        return {}
    if task.crontab is not None:
        cron = task.crontab
        return {"crontab": " ".join([cron.minute, cron.hour, cron.day_of_month, cron.month_of_year, cron.day_of_week])}
    return {"interval_seconds": task.interval.every}


def versions_of(kb: KnowledgeBase, reader: tuple[str, ...] | None = None) -> list[KnowledgeBaseVersion]:
    """A KB's versions, newest first, each with the documents and chunks it holds (counted now; with a
    ``reader``, only those it may read)."""
    versions = KnowledgeBaseVersion.objects.filter(knowledge_base=kb).order_by("-number")
    return [_count_contents(version, reader) for version in versions]


def version_of(kb: KnowledgeBase, number: int, *, counted: bool = True) -> KnowledgeBaseVersion:
    """A KB's version by number, with what it holds counted (a pass over its chunks) unless not ``counted``."""
    version = KnowledgeBaseVersion.objects.filter(knowledge_base=kb, number=number).first()
    if version is None:
        raise VersionNotFound(f"knowledge base {kb.pk} has no version {number}")
    return _count_contents(version) if counted else version


def _count_contents(version: KnowledgeBaseVersion, reader: tuple[str, ...] | None = None) -> KnowledgeBaseVersion:
    """Set ``chunk_count`` and ``document_count``: one aggregate over the version's own rows, its id a
    constant, so PostgreSQL finds them by the version index (counted for all versions at once, the plans
    read every tenant's chunks: docs/BENCHMARKS.md, "Knowledge lifecycle")."""
    chunks = Chunk.objects.filter(kb_version_id=version.pk)
    if reader is not None:
        chunks = chunks.filter(acl__overlap=list(reader))
    counts = chunks.aggregate(chunk_count=Count("id"), document_count=Count("document_id", distinct=True))
    version.chunk_count, version.document_count = counts["chunk_count"], counts["document_count"]
    return version


def task_status(tenant: Tenant, task_id: str, reachable: Collection[int] | None = None) -> dict[str, Any]:
    """State, progress, result and error of a task the tenant started (``GET /api/v1/tasks/{id}``);
    another tenant's task, or one of a KB outside ``reachable``, is reported exactly like one that does not exist."""
    records = KnowledgeTask.objects.filter(tenant=tenant, task_id=task_id)
    if reachable is not None:
        records = records.filter(knowledge_base_id__in=list(reachable))
    record = records.first()
    if record is None:
        raise TaskNotFound(f"unknown task id: {task_id}")
    meta = AsyncResult(task_id).backend.get_task_meta(task_id)  # one read: state and info must agree
    state, info = meta["status"], meta["result"]
    status = {"task_id": task_id, "kind": record.kind, "knowledge_base": record.knowledge_base_id, "state": state}
    status.update(progress=None, result=None, error=None)
    if state == KnowledgeTask.PROGRESS:
        status["progress"] = info
    elif state == "SUCCESS":
        status["result"] = dict(info)
        status["progress"] = status["result"].pop("progress", None)
    elif isinstance(info, BaseException):  # FAILURE, or RETRY after a transient error
        status["error"] = f"{type(info).__name__}: {info}"
    return status


def analyzer_for_tenant(tenant_id: int) -> Analyzer:
    """The analyzer with the tenant's protected terms (one small query; analyzers are cached)."""
    from engines.analysis import DictionaryEntry, analyzer_for

    entries = DictionaryTerm.objects.filter(tenant_id=tenant_id).values_list("kind", "value")
    return analyzer_for(DictionaryEntry(kind=kind, value=value) for kind, value in entries)


@dataclass(frozen=True)
class SynonymRule:
    """An active synonym rule as the query expander applies it (``knowledge.models.Synonym``)."""

    kind: str
    terms: tuple[str, ...]
    replacements: tuple[str, ...]
    weight: float


@dataclass(frozen=True)
class Vocabulary:
    """What a search applies of a tenant's synonyms and protected terms."""

    analyzer: Analyzer
    synonyms: tuple[SynonymRule, ...]


# Tenants whose vocabulary one process keeps (an analyzer and a few rules each); the least recent go first.
VOCABULARY_CACHE_SIZE = 1024


@lru_cache(maxsize=VOCABULARY_CACHE_SIZE)
def tenant_vocabulary(tenant_id: int, stamp: int) -> Vocabulary:
    """The tenant's vocabulary at ``stamp`` (``Tenant.vocabulary_stamp``, which every write of its
    synonyms or protected terms renews, read by :func:`searched_knowledge`): two queries per stamp and
    process instead of per search, and an edit applies to the next search in every process."""
    rules = Synonym.objects.filter(tenant_id=tenant_id, is_active=True).values_list(
        "kind", "terms", "replacements", "weight"
    )
    synonyms = tuple(SynonymRule(kind, tuple(terms), tuple(targets), weight) for kind, terms, targets, weight in rules)
    return Vocabulary(analyzer_for_tenant(tenant_id), synonyms)


def tenant_stats(
    tenant: Tenant, reachable: Collection[int] | None = None, reader: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """What the tenant holds, how many queries it was served and what it consumed (``GET /api/v1/stats``);
    of a KB-limited key, only its KBs (``reachable``); of a reader, only the documents and chunks it may read."""
    kbs = KnowledgeBase.objects.filter(tenant=tenant)
    if reachable is not None:
        kbs = kbs.filter(pk__in=list(reachable))
    documents = Document.objects.filter(tenant=tenant, knowledge_base__in=kbs)
    chunks = Chunk.objects.filter(tenant=tenant, kb_version__in=kbs.values("active_version"))
    if reader is not None:
        documents, chunks = documents.filter(readable_by(reader)), chunks.filter(acl__overlap=list(reader))
    by_status = dict(documents.order_by().values_list("status").annotate(Count("id")))
    return {
        "tenant": tenant.name,
        "knowledge_bases": kbs.count(),
        "documents": {
            "total": sum(by_status.values()),
            "by_status": {status: by_status.get(status, 0) for status in Document.Status.values},
        },
        "chunks": chunks.count(),
        "queries": query_counts(tenant.pk),
        "cost": tenant_costs(tenant.pk),
    }


@dataclass(frozen=True)
class KnowledgeBaseGlance:
    """One KB as the console's overview shows it."""

    kb: KnowledgeBase
    documents_by_status: dict[str, int]
    chunks: int  # in the active version
    last_errors: list[Document]  # failed documents, the latest first
    building: list[tuple[KnowledgeBaseVersion, KnowledgeTask | None]]  # versions in build, with their task
    sources: list[tuple[KnowledgeSource, dict[str, Any], SourceRun | None]]  # with their schedule and last run


def knowledge_bases_at_a_glance(
    tenants: Iterable[Tenant], errors_shown: int = 5, only: int | None = None
) -> list[KnowledgeBaseGlance]:
    """The tenants' KBs (or the one of id ``only``) with their documents by status, active chunks,
    latest failures, versions in build and sources."""
    found = KnowledgeBase.objects.filter(tenant__in=tenants).select_related("tenant", "active_version")
    kbs = list((found if only is None else found.filter(pk=only)).order_by("tenant__name", "name"))
    statuses: dict[int, dict[str, int]] = {kb.pk: dict.fromkeys(Document.Status.values, 0) for kb in kbs}
    rows = Document.objects.filter(knowledge_base__in=kbs).order_by().values_list("knowledge_base", "status")
    for kb_id, status, count in rows.annotate(Count("id")):
        statuses[kb_id][status] = count
    chunks = dict(
        Chunk.objects.filter(kb_version__in=[kb.active_version_id for kb in kbs if kb.active_version_id])
        .order_by().values_list("knowledge_base").annotate(Count("id"))
    )  # fmt: skip
    failed = Document.objects.filter(knowledge_base__in=kbs, status=Document.Status.FAILED).order_by("-updated_at")
    errors: dict[int, list[Document]] = {}
    for document in failed.only("knowledge_base", "source_uri", "error", "updated_at"):
        if len(errors.setdefault(document.knowledge_base_id, [])) < errors_shown:
            errors[document.knowledge_base_id].append(document)
    building, sources = _versions_in_build(kbs), _sources_with_last_run(kbs)
    return [
        KnowledgeBaseGlance(
            kb,
            statuses[kb.pk],
            chunks.get(kb.pk, 0),
            errors.get(kb.pk, []),
            building.get(kb.pk, []),
            sources.get(kb.pk, []),
        )
        for kb in kbs
    ]


def _sources_with_last_run(
    kbs: list[KnowledgeBase],
) -> dict[int, list[tuple[KnowledgeSource, dict[str, Any], SourceRun | None]]]:
    """Each KB's sources with their schedule and latest run (one query for the runs of all of them)."""
    sources = list(_sources_with_schedule(KnowledgeSource.objects.filter(knowledge_base__in=kbs)))
    runs = (
        SourceRun.objects.filter(source__in=sources).order_by("source_id", "-started_at", "-id").distinct("source_id")
    )
    last = {run.source_id: run for run in runs}
    by_kb: dict[int, list[tuple[KnowledgeSource, dict[str, Any], SourceRun | None]]] = {}
    for source in sources:
        by_kb.setdefault(source.knowledge_base_id, []).append((source, source_schedule(source), last.get(source.pk)))
    return by_kb


def _versions_in_build(kbs: list[KnowledgeBase]) -> dict[int, list[tuple[KnowledgeBaseVersion, KnowledgeTask | None]]]:
    """Each KB's building versions with the task building them: its latest build task (one builds at a time)."""
    versions = KnowledgeBaseVersion.objects.filter(knowledge_base__in=kbs, status=KnowledgeBaseVersion.Status.BUILDING)
    tasks = {
        task.knowledge_base_id: task
        for task in KnowledgeTask.objects.filter(knowledge_base__in=kbs, kind=KnowledgeTask.Kind.BUILD_VERSION)
        .select_related("tenant").order_by("knowledge_base_id", "-created_at").distinct("knowledge_base_id")
    }  # fmt: skip
    building: dict[int, list[tuple[KnowledgeBaseVersion, KnowledgeTask | None]]] = {}
    for version in versions.order_by("number"):
        building.setdefault(version.knowledge_base_id, []).append((version, tasks.get(version.knowledge_base_id)))
    return building


def recent_tasks_of(kb: KnowledgeBase, count: int = 10) -> list[KnowledgeTask]:
    """The KB's latest ingestion and build tasks, newest first."""
    tasks = KnowledgeTask.objects.filter(knowledge_base=kb).select_related("tenant")
    return list(tasks.order_by("-created_at")[:count])
