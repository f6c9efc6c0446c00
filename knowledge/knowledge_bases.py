"""Writes for knowledge bases: create (with an empty active version 1), search settings, delete (a
KB, or a tenant with all its KBs)."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from core.names import checked_name
from core.uniqueness import conflict_on
from knowledge.errors import KnowledgeBaseExists
from knowledge.models import KnowledgeBase, KnowledgeBaseVersion
from knowledge.search_settings import clean_search_settings
from knowledge.stores import graph_store, lexical_index, vector_index
from knowledge.versions import activate_first_version, index_settings
from tenants.models import Tenant


@transaction.atomic
def create_knowledge_base(
    *,
    tenant: Tenant,
    name: str,
    embedding_model: str | None = None,
    chunk_size: int | None = None,
    chunk_overlap: int | None = None,
    languages: list[str] | None = None,
    description: str = "",
    chunking: str | None = None,
    parent_chunk_size: int | None = None,
) -> KnowledgeBase:
    """A KB with an empty active version 1, sized for its embedding model. The name's uniqueness is
    the database's (``KnowledgeBaseExists``): of two concurrent creates, the second waits for the
    first and then conflicts."""
    name = checked_name(name)
    index = index_settings(embedding_model, chunk_size, chunk_overlap, languages, chunking, parent_chunk_size)
    taken = KnowledgeBaseExists(f"a knowledge base named {name!r} already exists")
    with conflict_on("unique_kb_name_per_tenant", taken):
        kb = KnowledgeBase.objects.create(tenant=tenant, name=name, description=description, **index)
    activate_first_version(kb)
    return kb


def update_search_settings(
    kb: KnowledgeBase, search_settings: dict[str, Any], *, version: KnowledgeBaseVersion | None = None
) -> dict[str, Any]:
    """Replace the KB's search settings, or ``version``'s (one of the KB's); returns them as stored.
    Validated here (``ValidationError``), so the admin, the API and commands store the same thing.
    Cached answers need no purge: the search cache key holds the settings a search used."""
    cleaned = clean_search_settings(search_settings)
    target = kb if version is None else version
    if version is not None and version.knowledge_base_id != kb.pk:
        raise ValueError(f"version {version.pk} is not a version of knowledge base {kb.pk}")
    target.search_settings = cleaned
    target.save(update_fields=["search_settings"])
    return cleaned


def delete_knowledge_base(kb: KnowledgeBase) -> None:
    """Remove a KB with its versions, documents and chunks, then each version's lexical index and graph.

    The indexes go once the rows are gone for good (after the commit), so a rolled-back delete
    leaves a searchable KB; an index that fails to drop is logged, and nothing searches it again."""
    version_ids = list(kb.versions.values_list("pk", flat=True))
    tenant_id = kb.tenant_id
    with transaction.atomic():
        kb.delete()
        transaction.on_commit(lambda: _drop_version_indexes(tenant_id, version_ids), robust=True)


@transaction.atomic
def delete_tenant(tenant: Tenant) -> None:
    """Remove a tenant with everything it owns; its knowledge bases go through
    :func:`delete_knowledge_base`, so their lexical indexes go too (hence here, not in ``tenants``)."""
    for kb in tenant.knowledge_bases.all():
        delete_knowledge_base(kb)
    tenant.delete()


def _drop_version_indexes(tenant_id: int, version_ids: list[int]) -> None:
    """Each version's graph (the PostgreSQL one went with the rows; Neo4j keeps it until told), vectors
    (pgvector's went with the rows) and lexical index."""
    graph, vectors, lexical = graph_store(), vector_index(), lexical_index()
    for version_id in version_ids:
        graph.drop_version(tenant_id, version_id)
        vectors.drop_version(version_id)
        lexical.drop_version(version_id)


def get_or_create_knowledge_base(*, tenant: Tenant, name: str, **options: Any) -> tuple[KnowledgeBase, bool]:
    """Of two processes creating it at once, the one that loses the insert reads the winner's KB."""
    existing = KnowledgeBase.objects.filter(tenant=tenant, name=name).select_related("active_version")
    kb = existing.first()
    if kb is not None:
        return kb, False
    try:
        return create_knowledge_base(tenant=tenant, name=name, **options), True
    except KnowledgeBaseExists:
        return existing.get(), False
