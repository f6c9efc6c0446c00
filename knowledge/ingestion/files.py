"""The files an ingestion reads: found on disk or stored as originals, with their labels (title, tags,
metadata) from a ``<file>.meta.json`` sidecar or an upload; a file that cannot be read is recorded as a
failed document."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from django.core.files.base import File
from django.core.files.storage import Storage

from knowledge.models import Document, KnowledgeBase, originals_storage
from knowledge.parsing import SUPPORTED_SUFFIXES, ParseError, doc_type_for
from tenants.principals import InvalidPrincipals, clean_principals

SIDECAR_SUFFIX = ".meta.json"
# A folder source's per-folder ACL: {"acl": [...]} for the files in its folder and below (docs/permissions.md).
FOLDER_ACL_FILE = ".acl.json"


@dataclass
class Labels:
    """What a document's sidecar (``<file>.meta.json``) or upload may set: title, tags, metadata and its
    ACL (empty: its KB's default; None, as a re-ingestion or a rebuild queues it: the document's own
    when it runs, so an ACL changed meanwhile is never undone)."""

    title: str | None = None
    tags: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    acl: list[str] | None = field(default_factory=list)


@dataclass(frozen=True)
class SourceFile:
    """A file to ingest. ``labels`` given (an upload's): they replace the sidecar; ``original``: the
    stored copy the file already is (else the Ingester keeps one when asked to); ``force``: re-chunk
    and re-embed it even when unchanged (a re-ingest asked for)."""

    path: Path
    source_uri: str
    labels: Labels | None = None
    original: str = ""
    force: bool = False


def discover_files(paths: Iterable[Path]) -> list[SourceFile]:
    """Supported files under the given paths. A file's URI is its path from the folder given
    (``sample_kb/faq/x.csv``), or its name when given directly, so URIs do not depend on the cwd. Hidden
    files and folders under a folder (``.git/``, ``.vocabulary/``) are no documents."""
    found: dict[str, SourceFile] = {}
    for root in paths:
        root = Path(root)
        if root.is_dir():
            for path in sorted(p for p in root.rglob("*") if p.is_file()):
                hidden = any(part.startswith(".") for part in path.relative_to(root).parts)
                if path.suffix.lower() in SUPPORTED_SUFFIXES and not path.name.endswith(SIDECAR_SUFFIX) and not hidden:
                    uri = f"{root.resolve().name}/{path.relative_to(root).as_posix()}"
                    found.setdefault(uri, SourceFile(path, uri))
        elif root.is_file():
            found.setdefault(root.name, SourceFile(root, root.name))
        else:
            raise FileNotFoundError(f"no such file or directory: {root}")
    return list(found.values())


def read_sidecar(path: Path, source_uri: str = "", default_acl: Sequence[str] = ()) -> Labels:
    """A file's labels from its sidecar. Without an ``acl`` there, the nearest folder ACL file
    (:data:`FOLDER_ACL_FILE`) from the file's folder up to the folder its ``source_uri`` starts at wins,
    then ``default_acl`` (its source's); none: the KB's default (docs/permissions.md)."""
    sidecar = path.with_name(path.name + SIDECAR_SUFFIX)
    labels = Labels()
    if sidecar.exists():
        try:
            data = json.loads(sidecar.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ParseError(f"metadata file {sidecar.name} is not valid JSON: {exc}") from exc
        labels = labels_from(data, where=f"metadata file {sidecar.name}")
    if not labels.acl:
        labels.acl = _folder_acl(path, len(PurePosixPath(source_uri).parts) - 1) or list(default_acl)
    return labels


def _folder_acl(path: Path, levels: int) -> list[str]:
    """The ACL of the nearest :data:`FOLDER_ACL_FILE` in ``path``'s folder or up to ``levels - 1`` above it."""
    folder = path.parent
    for _ in range(max(levels, 0)):
        acl_file = folder / FOLDER_ACL_FILE
        if acl_file.is_file():
            try:
                data = json.loads(acl_file.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise ParseError(f"folder ACL file {acl_file} is not valid JSON: {exc}") from exc
            if not isinstance(data, dict):
                raise ParseError(f"folder ACL file {acl_file} must hold a JSON object")
            return _acl(data.get("acl", []), f"folder ACL file {acl_file}")
        folder = folder.parent
    return []


def _acl(value: object, where: str) -> list[str]:
    try:
        return clean_principals(value, where=f"{where}: 'acl'")
    except InvalidPrincipals as exc:
        raise ParseError(str(exc)) from None


def labels_from(data: object, *, where: str = "metadata") -> Labels:
    """Title, tags and metadata from a sidecar's or an upload's JSON; ``ParseError`` names what is wrong."""
    if not isinstance(data, dict):
        raise ParseError(f"{where} must hold a JSON object")
    tags, metadata, title = data.get("tags", []), data.get("metadata", {}), data.get("title")
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise ParseError(f"{where}: 'tags' must be a list of strings")
    if not isinstance(metadata, dict):
        raise ParseError(f"{where}: 'metadata' must be an object")
    if title is not None and not isinstance(title, str):
        raise ParseError(f"{where}: 'title' must be a string")
    return Labels(title=title, tags=tags, metadata=metadata, acl=_acl(data.get("acl", []), where))


def keep_original(kb: KnowledgeBase, name: str, md5: str, content: File[bytes]) -> str:
    """Store a file's bytes for rebuilds; returns its storage name. Addressed by KB and content, so
    storing the same file again (a retried upload, an unchanged re-ingest) writes nothing."""
    storage = originals_storage()
    path = f"kb-{kb.pk}/{md5}/{storage.get_valid_name(name)}"
    return path if storage.exists(path) else storage.save(path, content)


def md5_of(upload: File[bytes]) -> str:
    digest = hashlib.md5()
    for block in upload.chunks():
        digest.update(block)
    upload.seek(0)
    return digest.hexdigest()


def task_file(source_uri: str, original: str, labels: Labels | None) -> dict[str, Any]:
    """A stored file as an ingestion task's JSON gets it (``"force": true`` added for a re-ingest)."""
    return {"source_uri": source_uri, "original": original, "labels": asdict(labels) if labels else None}


@contextmanager
def stored_sources(files: list[dict[str, Any]]) -> Iterator[list[SourceFile]]:
    """Task files as local sources (copies in a scratch folder when the storage has no local paths)."""
    storage = originals_storage()
    with tempfile.TemporaryDirectory(prefix="ingest-") as scratch:
        yield [
            SourceFile(
                _local_copy(storage, item["original"], Path(scratch) / str(position)),
                item["source_uri"],
                labels=Labels(**item["labels"]) if item["labels"] is not None else None,
                original=item["original"],
                force=item.get("force", False),
            )
            for position, item in enumerate(files)
        ]


def _local_copy(storage: Storage, name: str, scratch: Path) -> Path:
    """A local path of a stored file: the file itself on a filesystem storage, else a copy in ``scratch``
    (named like the original: parsing reads its suffix)."""
    try:
        return Path(storage.path(name))
    except NotImplementedError:
        scratch.mkdir(parents=True)
        local = scratch / Path(name).name
        with storage.open(name) as stored, open(local, "wb") as copy:
            shutil.copyfileobj(stored, copy)
        return local


def record_failure(kb: KnowledgeBase, source_uri: str, existing: Document | None, reason: str) -> Document:
    """Mark a file's document failed with a readable reason; a previously ingested version stays searchable."""
    if existing is not None and existing.chunk_count:
        reason = f"{reason} (the previously ingested version stays searchable)"
    path = Path(source_uri)
    document, _ = Document.objects.update_or_create(
        knowledge_base=kb,
        source_uri=source_uri,
        defaults={
            "tenant_id": kb.tenant_id,
            "doc_type": _doc_type_or_unknown(path),
            "title": existing.title if existing else path.stem,
            "status": Document.Status.FAILED,
            "error": reason,
        },
    )
    return document


def _doc_type_or_unknown(path: Path) -> str:
    try:
        return doc_type_for(path)
    except ParseError:
        return "unknown"
