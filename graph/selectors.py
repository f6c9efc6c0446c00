"""Reads of the graph console's pages, all through the graph store (``knowledge.stores.graph_store``), so
they show the graph wherever it lives (PostgreSQL's tables or Neo4j): a KB version's entities, an
entity's neighbours and passages, a version's communities and their passages. Every read is scoped to
one tenant and KB version the console user may see; passages are read from the chunk rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AnonymousUser, User

from engines.base import Community, GraphNode, GraphScope
from engines.graph_relations import relation_name
from knowledge.models import Chunk, KnowledgeBaseVersion
from knowledge.stores import graph_store
from tenants.selectors import tenants_visible_to

ENTITIES_PER_PAGE = 100


@dataclass(frozen=True)
class BrowsedEntity:
    """An entity as the console shows and curates it: the store's node and the version it belongs to."""

    node: GraphNode
    version: KnowledgeBaseVersion

    @property
    def pk(self) -> int:
        return self.node.entity_id

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def label(self) -> str:
        return self.node.label

    @property
    def kind(self) -> str:
        return self.node.kind

    @property
    def chunk_count(self) -> int:
        return self.node.chunk_count

    @property
    def tenant_id(self) -> int:
        return self.version.knowledge_base.tenant_id

    @property
    def kb_version_id(self) -> int:
        return self.version.pk


def _scope(version: KnowledgeBaseVersion) -> GraphScope:
    return GraphScope(version.knowledge_base.tenant_id, (version.pk,))


def browsable_versions(user: User | AnonymousUser) -> list[KnowledgeBaseVersion]:
    """The KB versions whose graph the user may browse (not failed builds): by tenant, KB, newest first."""
    return list(
        KnowledgeBaseVersion.objects.filter(knowledge_base__tenant__in=tenants_visible_to(user))
        .exclude(status=KnowledgeBaseVersion.Status.FAILED)
        .select_related("knowledge_base__tenant")
        .order_by("knowledge_base__tenant__name", "knowledge_base__name", "-number")
    )


def chosen_version(user: User | AnonymousUser, version_id: str | None) -> KnowledgeBaseVersion | None:
    """The version asked for if the user may browse it; without one, the first KB's active version."""
    versions = browsable_versions(user)
    if version_id:
        return next((version for version in versions if str(version.pk) == version_id), None)
    active = [version for version in versions if version.status == KnowledgeBaseVersion.Status.ACTIVE]
    first = active or versions
    return first[0] if first else None


def entity_page(
    version: KnowledgeBaseVersion, *, contains: str = "", kind: str = "", page: int = 0
) -> tuple[int, list[GraphNode]]:
    """(how many entities match, those of page ``page``), the most mentioned first."""
    return graph_store().browse(
        _scope(version), contains=contains.strip(), kind=kind, offset=page * ENTITIES_PER_PAGE, limit=ENTITIES_PER_PAGE
    )


def find_entity(user: User | AnonymousUser, entity_id: int, version_id: str | None) -> BrowsedEntity | None:
    """An entity of a version the user may browse (of any such version when none is named)."""
    versions = browsable_versions(user)
    if version_id:
        versions = [version for version in versions if str(version.pk) == version_id]
    by_tenant: dict[int, list[KnowledgeBaseVersion]] = {}
    for version in versions:
        by_tenant.setdefault(version.knowledge_base.tenant_id, []).append(version)
    for tenant_id, tenant_versions in by_tenant.items():
        scope = GraphScope(tenant_id, tuple(version.pk for version in tenant_versions))
        for node in graph_store().entities(scope, [entity_id]):
            return BrowsedEntity(node, next(v for v in tenant_versions if v.pk == node.version_id))
    return None


def entity_named(entity: BrowsedEntity, name: str) -> BrowsedEntity | None:
    """The entity of the same version with this normalized name."""
    found = graph_store().find_entities(_scope(entity.version), [name])
    return BrowsedEntity(found[0], entity.version) if found else None


def entity_neighbours(entity: BrowsedEntity, limit: int = 30) -> list[dict[str, Any]]:
    """An entity's strongest neighbours in its own version: label, kind, summed weight, passages relating
    them and the typed relations, each read from the entity to the neighbour ("made_by", or "makes"
    when the neighbour is made by it; co-occurrence is left out)."""
    return [
        {"entity_id": row.entity_id, "label": row.label, "kind": row.kind, "weight": row.weight,
         "passages": row.passages,
         "kinds": list(dict.fromkeys(relation_name(kind, reversed_=backward) for kind, backward in row.relations))}
        for row in graph_store().neighbours(_scope(entity.version), entity.pk, limit)
    ]  # fmt: skip


def entity_mentions(entity: BrowsedEntity, limit: int = 30) -> list[tuple[Chunk, int]]:
    """The passages mentioning an entity most, with their documents, and how often each mentions it."""
    counts = {chunk: count for _, chunk, count in graph_store().mentions(_scope(entity.version), [entity.pk], limit)}
    return [(chunk, counts[chunk.pk]) for chunk in _chunks(entity.version, list(counts))]


def version_communities(version: KnowledgeBaseVersion, level: int | None = None) -> list[Community]:
    """A version's communities (of one level, or all), by level and number."""
    return graph_store().communities(_scope(version), level)


def find_community(version: KnowledgeBaseVersion, level: int, number: int) -> Community | None:
    return next((c for c in graph_store().communities(_scope(version), level) if c.number == number), None)


def community_chunks(version: KnowledgeBaseVersion, community: Community) -> list[Chunk]:
    """A community's supporting passages with their documents, in its order."""
    return _chunks(version, list(community.chunk_ids))


def _chunks(version: KnowledgeBaseVersion, chunk_ids: list[int]) -> list[Chunk]:
    """These chunks of the version (its own tenant's), in the order given."""
    chunks = Chunk.objects.filter(
        tenant_id=version.knowledge_base.tenant_id, kb_version_id=version.pk, pk__in=chunk_ids
    ).select_related("document")
    by_id = {chunk.pk: chunk for chunk in chunks}
    return [by_id[chunk_id] for chunk_id in chunk_ids if chunk_id in by_id]
