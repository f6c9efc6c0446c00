"""What every search reads before it searches, on the hot path: the searched versions with the tenant's
vocabulary stamp (raw SQL, one round trip), the versions holding restricted chunks, and the tenant's
vocabulary. Raw SQL where compiling the ORM query cost more than running it."""

from __future__ import annotations

import json
import threading
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from cachetools import TTLCache

from engines.database import read_connection
from knowledge.errors import KnowledgeBaseNotFound
from knowledge.models import (
    PLAIN,
    Chunk,
    DictionaryTerm,
    KnowledgeBase,
    KnowledgeBaseVersion,
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
