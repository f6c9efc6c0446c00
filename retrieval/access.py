"""Who a search reads as, and which knowledge bases it may reach (issue 48, docs/permissions.md).

Every search entry point (REST, Dify, the console, MCP, the OpenAI-compatible endpoints) builds its
``SearchRequest`` with :func:`key_access` from the caller's API key; the pipeline then checks the reader
inside each engine's filter (:func:`reader_check`). A request built without it reads as ``*`` alone:
what everyone in the tenant may read.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from graph.readable import ReadableChunks
from knowledge.selectors.search import SearchedKnowledge, restricted_versions
from retrieval import selectors
from retrieval.errors import AccessCheckUnavailable
from retrieval.filters import compile_filters
from tenants.models import ApiKey, Tenant


def key_access(api_key: ApiKey, principals: list[str] | None = None) -> dict[str, Any]:
    """The ``SearchRequest`` fields of a search by ``api_key``: its reader (bound principals win; a body's
    ``principals`` need the ``act_as`` scope, else ``ActAsNotAllowed``, a 403) and the KBs it may reach."""
    return {
        "reader": api_key.reader(principals),
        "reachable_kb_ids": api_key.reachable_kb_ids,
    }


def reader_check(principals: tuple[str, ...], knowledge: SearchedKnowledge) -> tuple[str, ...] | None:
    """The principals to check chunks' ACLs against, or None when no searched version holds a chunk
    closed to anyone (every reader holds ``*``, so the check would pass every chunk). A failure to
    find out refuses the search (503 ``access_check_unavailable``): it never runs unchecked."""
    try:
        restricted = restricted_versions((version.version_id, version.revision) for version in knowledge.versions)
    except Exception as error:
        raise AccessCheckUnavailable(
            "The permission check could not run; the search is refused rather than answered unfiltered."
        ) from error
    return principals if restricted else None


def readable_to_reader(tenant: Tenant, reader: tuple[str, ...] | None) -> ReadableChunks | None:
    """The graph's check of a reader (``graph.readable``): chunk ids -> those it may read; None when the
    search checks no reader (it may read every passage)."""
    if reader is None:
        return None
    check = compile_filters(None, reader)

    def readable(chunk_ids: list[int]) -> Collection[int]:
        return selectors.hashes_of_chunks_passing(tenant, chunk_ids, check).keys()

    return readable
