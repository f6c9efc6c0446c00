"""Writes for knowledge sources: registering a folder or a list of URLs with its beat schedule, and the
sync that keeps a KB equal to its source (new files ingested, changed ones re-ingested, gone ones
taken out of search at once and purged after ``SOURCE_REMOVAL_GRACE_HOURS``), recorded as runs.

A sync goes through the same ingestion as uploads (``ingest_stored_files``): a changed file's old
chunks stay searchable until its new ones commit, in one transaction, and a version being built gets
the files too.
"""

from __future__ import annotations

import hashlib
import json
import mimetypes
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlsplit

from django.conf import settings
from django.core.files.base import ContentFile
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, transaction
from django.utils import timezone
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

from core.uniqueness import get_or_create_serialized
from engines.url_fetcher import FetchError, UrlFetcher
from knowledge.acls import set_source_acl
from knowledge.documents import remove_from_search
from knowledge.errors import InvalidSourcePath
from knowledge.ingestion.files import FOLDER_ACL_FILE, SIDECAR_SUFFIX, Labels, SourceFile, keep_original, task_file
from knowledge.ingestion.stored import ingest_stored_files, store_local_files
from knowledge.models import Document, KnowledgeBase, KnowledgeSource, KnowledgeTask, SourceRun
from knowledge.parsing import SUPPORTED_SUFFIXES
from knowledge.queue import queue_task
from tenants.principals import clean_principals

SYNC_TASK = "knowledge.tasks.sync_source"
FAILURES_KEPT = 50  # per run
RUNS_KEPT = 100  # per source; older runs are deleted by the next sync
# What a fetched body is parsed as when its URL's path has no supported suffix.
SUFFIX_OF_CONTENT_TYPE = {
    "text/html": ".html", "application/xhtml+xml": ".html", "text/plain": ".txt", "text/markdown": ".md",
    "application/pdf": ".pdf", "text/csv": ".csv", "application/json": ".json",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": ".pptx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": ".xlsx",
    "image/png": ".png", "image/jpeg": ".jpg",
}  # fmt: skip


# --- where a folder source may be -------------------------------------------------------------------


def source_roots() -> list[Path]:
    """``KNOWLEDGE_SOURCE_ROOTS`` as absolute folders (relative ones from the project folder)."""
    return [Path(os.path.abspath(settings.BASE_DIR / root)) for root in settings.KNOWLEDGE_SOURCE_ROOTS]


def checked_folder(path: str) -> Path:
    """The absolute folder of a folder source, or ``InvalidSourcePath`` naming the rule it breaks:
    ``parent_reference`` (a ``..``), ``outside_roots``, ``symlink_escape`` (it, or a folder above it,
    links out of every root) or ``not_a_folder``. A relative path is taken from the first root."""
    if ".." in PurePosixPath(path).parts or ".." in Path(path).parts:
        raise _invalid("parent_reference", f"{path!r}: a source path may not contain '..'")
    roots = source_roots()
    if not roots:
        raise _invalid("outside_roots", "no folder may be a source: KNOWLEDGE_SOURCE_ROOTS is empty")
    folder = Path(os.path.abspath(roots[0] / path))  # an absolute path stays itself
    named = ", ".join(str(root) for root in roots)
    if not any(folder.is_relative_to(root) for root in roots):
        raise _invalid("outside_roots", f"{folder} is not under a source root (KNOWLEDGE_SOURCE_ROOTS: {named})")
    if not any(folder.resolve().is_relative_to(root.resolve()) for root in roots):
        raise _invalid("symlink_escape", f"{folder} leads out of the source roots through a symbolic link")
    if not folder.is_dir():
        raise _invalid("not_a_folder", f"{folder} is not an existing folder")
    return folder


def _invalid(rule: str, message: str) -> InvalidSourcePath:
    return InvalidSourcePath(message, details={"rule": rule})


def _check_not_anothers(kb: KnowledgeBase, folder: Path) -> None:
    """A folder (or one inside or above it) registered by another tenant stays that tenant's."""
    others = KnowledgeSource.objects.filter(kind=KnowledgeSource.Kind.FOLDER).exclude(
        knowledge_base__tenant_id=kb.tenant_id
    )
    for other in others.values_list("path", flat=True):
        if folder.is_relative_to(other) or Path(other).is_relative_to(folder):
            raise _invalid("taken", f"{folder} overlaps a folder another tenant's source reads")


# --- registering sources ----------------------------------------------------------------------------


@transaction.atomic
def create_source(
    kb: KnowledgeBase,
    *,
    kind: str,
    path: str = "",
    urls: list[str] | None = None,
    interval_seconds: int | None = None,
    crontab: str = "",
    acl: list[str] | None = None,
) -> KnowledgeSource:
    """A folder (checked against the roots) or URL source of ``kb`` with its beat entry: every
    ``interval_seconds``, or on the five-field ``crontab`` (UTC). ``acl``: its documents' (none: the KB's default)."""
    source = KnowledgeSource(knowledge_base=kb, kind=kind, acl=clean_principals(acl or [], where="acl"))
    if kind == KnowledgeSource.Kind.FOLDER:
        folder = checked_folder(path)
        _check_not_anothers(kb, folder)
        source.path = str(folder)
    else:
        source.urls = list(dict.fromkeys(urls or []))
    source.save()
    set_schedule(source, interval_seconds=interval_seconds, crontab=crontab)
    return source


def set_schedule(source: KnowledgeSource, *, interval_seconds: int | None = None, crontab: str = "") -> None:
    """Create or change the source's beat entry (beat notices the change on its next tick). Its schedule
    row is shared by the entries of the same interval or crontab; django-celery-beat's tables have no
    unique constraint on them, so concurrent creators take turns (``get_or_create_serialized``)."""
    schedule: dict[str, CrontabSchedule | IntervalSchedule | None] = {"interval": None, "crontab": None}
    if crontab:
        minute, hour, day_of_month, month_of_year, day_of_week = crontab.split()
        schedule["crontab"] = get_or_create_serialized(
            CrontabSchedule, minute=minute, hour=hour, day_of_month=day_of_month, month_of_year=month_of_year,
            day_of_week=day_of_week, timezone="UTC",
        )  # fmt: skip
    else:
        schedule["interval"] = get_or_create_serialized(
            IntervalSchedule, every=interval_seconds, period=IntervalSchedule.SECONDS
        )
    if source.periodic_task is None:
        source.periodic_task = PeriodicTask.objects.create(
            name=f"sync knowledge source {source.pk}", task=SYNC_TASK, args=json.dumps([source.pk]), **schedule
        )
        source.save(update_fields=["periodic_task"])
    else:
        for name, value in schedule.items():
            setattr(source.periodic_task, name, value)
        source.periodic_task.save()


@transaction.atomic
def update_source(
    source: KnowledgeSource,
    *,
    urls: list[str] | None = None,
    interval_seconds: int | None = None,
    crontab: str = "",
    enabled: bool | None = None,
    acl: list[str] | None = None,
) -> None:
    """Change a source in place: a URL source's list (a URL dropped leaves search at the next sync, as a
    page that answers 404 does), its schedule, or pause / resume its scheduled syncs (a sync asked for
    by hand still runs). A folder's path does not change: that is another source."""
    if urls is not None:
        source.urls = list(dict.fromkeys(urls))
        source.fetch_state = {url: state for url, state in source.fetch_state.items() if url in source.urls}
        source.save(update_fields=["urls", "fetch_state"])
    if interval_seconds or crontab:
        set_schedule(source, interval_seconds=interval_seconds, crontab=crontab)
    if acl is not None:
        set_source_acl(source, acl)
    if enabled is not None and source.periodic_task is not None:
        source.periodic_task.enabled = enabled
        source.periodic_task.save()  # save(), not update(): beat learns of changes from its signal


def delete_source(source: KnowledgeSource) -> None:
    """Stop syncing: the source and its beat entry go (``knowledge.signals``); its documents stay in
    the KB as they are."""
    source.delete()


def queue_sync(source: KnowledgeSource) -> KnowledgeTask:
    """Sync a source now (``POST .../sources/{id}/sync``, the admin's action): a task its tenant can follow."""
    with transaction.atomic():
        return queue_task(
            source.knowledge_base, KnowledgeTask.Kind.SYNC_SOURCE, SYNC_TASK, (source.pk, SourceRun.Trigger.MANUAL)
        )


# --- syncing -----------------------------------------------------------------------------------------


@dataclass
class _Collected:
    """What walking a source found: task files to ingest, the URIs it still holds, what failed or was
    unchanged before ingestion (a 304), and the URL validators to keep once it is done."""

    files: list[dict[str, Any]] = field(default_factory=list)
    present: set[str] = field(default_factory=set)
    failures: list[tuple[str, str]] = field(default_factory=list)
    unchanged: int = 0
    fetch_state: dict[str, dict[str, str]] = field(default_factory=dict)


def sync(
    source: KnowledgeSource, *, trigger: str, start_progress: Callable[[int], Callable[[int], None]]
) -> SourceRun | None:
    """Make the KB hold what the source holds, recorded as a run; None when another sync of the source
    is running. ``start_progress(total)`` returns the callback told of each document done."""
    with _sync_lock(source.pk) as locked:
        if not locked:
            return None
        # Runs still marked running died with their worker: the lock was theirs otherwise.
        source.runs.filter(status=SourceRun.Status.RUNNING).update(
            status=SourceRun.Status.FAILED, error="interrupted (its worker stopped)", finished_at=timezone.now()
        )
        run = SourceRun.objects.create(source=source, trigger=trigger)
        try:
            _sync(source, run, start_progress)
            run.status = SourceRun.Status.SUCCEEDED
        except Exception as exc:
            run.status, run.error = SourceRun.Status.FAILED, f"{type(exc).__name__}: {exc}"
            raise
        finally:
            run.finished_at = timezone.now()
            run.save()
            old = source.runs.order_by("-started_at", "-id").values_list("pk", flat=True)[RUNS_KEPT:]
            SourceRun.objects.filter(pk__in=list(old)).delete()
    return run


def _sync(source: KnowledgeSource, run: SourceRun, start_progress: Callable[[int], Callable[[int], None]]) -> None:
    kb = KnowledgeBase.objects.select_related("active_version").get(pk=source.knowledge_base_id)
    collected = _collect_folder(kb, source) if source.kind == KnowledgeSource.Kind.FOLDER else _collect_urls(kb, source)
    report = ingest_stored_files(kb, collected.files, on_progress=start_progress(len(collected.files)))
    ours = Document.objects.filter(knowledge_base=kb, source_uri__in=collected.present)
    ours.exclude(source=source).update(source=source)
    gone = source.documents.exclude(status=Document.Status.REMOVED).exclude(source_uri__in=collected.present)
    run.removed = remove_from_search(kb, list(gone.values_list("pk", flat=True)))
    run.added, run.replaced = report.added, report.replaced
    run.unchanged = report.unchanged + collected.unchanged
    failures = collected.failures + report.failures
    run.failed, run.failures = len(failures), [{"name": n, "error": e} for n, e in failures[:FAILURES_KEPT]]
    if source.kind == KnowledgeSource.Kind.URLS:
        KnowledgeSource.objects.filter(pk=source.pk).update(fetch_state=collected.fetch_state)


def _collect_folder(kb: KnowledgeBase, source: KnowledgeSource) -> _Collected:
    """Every supported file under the folder (checked against the roots again: they may have
    changed), stored as originals. Symlinked folders are not entered; a symlinked file that leads out
    of the roots fails. URIs are as ``manage.py ingest`` names them: ``<folder name>/<relative path>``."""
    folder = checked_folder(source.path)
    roots = [root.resolve() for root in source_roots()]
    collected, files = _Collected(), []
    for directory, _, names in os.walk(folder):
        for name in sorted(names):
            path = Path(directory) / name
            if (
                path.suffix.lower() not in SUPPORTED_SUFFIXES
                or name.endswith(SIDECAR_SUFFIX)
                or name == FOLDER_ACL_FILE
            ):
                continue
            uri = f"{folder.name}/{path.relative_to(folder).as_posix()}"
            collected.present.add(uri)
            if not any(path.resolve().is_relative_to(root) for root in roots):
                collected.failures.append((uri, "a symbolic link out of the source roots (not read)"))
                continue
            files.append(SourceFile(path, uri))
    collected.files, failures = store_local_files(kb, files, source.acl)
    collected.failures += failures
    return collected


def _collect_urls(kb: KnowledgeBase, source: KnowledgeSource) -> _Collected:
    """Each URL fetched (conditionally when its document is ready), stored as an original. A URL that
    answers 404 / 410 is gone from the source; one that cannot be fetched now keeps its document."""
    fetcher = UrlFetcher(
        timeout_s=settings.SOURCE_URL_TIMEOUT_S,
        max_bytes=settings.SOURCE_URL_MAX_BYTES,
        allowed_networks=settings.SOURCE_URL_ALLOWED_NETWORKS,
    )
    ready = set(
        Document.objects.filter(knowledge_base=kb, source_uri__in=source.urls, status=Document.Status.READY)
        .values_list("source_uri", flat=True)
    )  # fmt: skip
    collected = _Collected()
    for url in source.urls:
        validators = source.fetch_state.get(url, {}) if url in ready else {}
        try:
            fetched = fetcher.fetch(
                url, etag=validators.get("etag", ""), last_modified=validators.get("last_modified", "")
            )
        except FetchError as exc:
            collected.present.add(url)
            collected.failures.append((url, str(exc)))
            continue
        if fetched.status == "gone":
            continue
        collected.present.add(url)
        collected.fetch_state[url] = {"etag": fetched.etag, "last_modified": fetched.last_modified}
        if fetched.status == "not_modified":
            collected.unchanged += 1
            continue
        name = _file_name(fetched.url, fetched.content_type)
        if name is None:
            collected.failures.append((url, f"unsupported content type {fetched.content_type or '(none)'}"))
            continue
        original = keep_original(kb, name, hashlib.md5(fetched.content).hexdigest(), ContentFile(fetched.content))
        collected.files.append(task_file(url, original, Labels(acl=list(source.acl)) if source.acl else None))
    return collected


def _file_name(url: str, content_type: str) -> str | None:
    """A file name for a fetched body that parsing understands: the URL's last segment when its suffix
    is supported, else named by its content type; None when neither is."""
    segment = unquote(PurePosixPath(urlsplit(url).path).name) or "index"
    if Path(segment).suffix.lower() in SUPPORTED_SUFFIXES:
        return segment
    suffix = SUFFIX_OF_CONTENT_TYPE.get(content_type) or mimetypes.guess_extension(content_type or "")
    return f"{segment}{suffix}" if suffix in SUPPORTED_SUFFIXES else None


# pg_try_advisory_xact_lock(class, source id): one sync of a source at a time, released when it ends or
# its connection closes (a killed worker).
_SYNC_LOCK_CLASS = 15_002


@contextmanager
def _sync_lock(source_id: int) -> Iterator[bool]:
    """Held by a transaction left open, for the sync, on a connection of its own: a session-level lock
    would stay with whichever server connection a transaction-mode pooler (pgbouncer) ran its statement
    on, and its unlock could reach another (docs/operations.md, "Connection pooler")."""
    key = [_SYNC_LOCK_CLASS, source_id & 0x7FFFFFFF]
    holder = connections.create_connection(DEFAULT_DB_ALIAS)
    try:
        with holder.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", key)
            locked = cursor.fetchone()[0]
        yield locked
    finally:
        with suppress(DatabaseError), holder.cursor() as cursor:
            cursor.execute("ROLLBACK")  # ends the lock; a pooler gets its server connection back clean
        holder.close()
