"""The reads of the graph's console pages: an entity's neighbours and mentions, a community's passages."""

from __future__ import annotations

from django.contrib.postgres.aggregates import ArrayAgg
from django.db.models import Case, F, Q, Sum, Value, When

from knowledge.models import (
    Chunk,
    GraphCommunity,
    GraphEdge,
    GraphEntity,
    GraphMention,
)


def entity_neighbours(entity: GraphEntity, limit: int = 30) -> list[dict]:
    """An entity's strongest neighbours in its own tenant and version: label, kind, summed weight, passages
    relating them and the typed relations, each read from the entity to the neighbour ("made_by", or
    "makes" when the neighbour is made by it; co-occurrence is left out). An edge is stored once per
    pair and kind, so the entity is either end."""
    from engines.graph_relations import relation_name

    edges = GraphEdge.objects.filter(tenant_id=entity.tenant_id, kb_version_id=entity.kb_version_id).filter(
        Q(source=entity) | Q(target=entity)
    )
    rows = list(
        edges.annotate(
            neighbour=Case(When(source=entity, then=F("target_id")), default=F("source_id")),
            backward=Case(When(source=entity, then=Value(False)), default=Value(True)),
        )
        .values("neighbour")
        .annotate(
            weight=Sum("weight"), passages=Sum("passages"),
            kinds=ArrayAgg("kind", ordering=("kind", "backward")),
            backwards=ArrayAgg("backward", ordering=("kind", "backward")),
        )
        .order_by("-weight", "neighbour")[:limit]
    )  # fmt: skip
    found = GraphEntity.objects.filter(pk__in=[row["neighbour"] for row in rows]).values_list("pk", "label", "kind")
    labels = {pk: (label, kind) for pk, label, kind in found}
    return [
        {"entity_id": row["neighbour"], "label": labels[row["neighbour"]][0], "kind": labels[row["neighbour"]][1],
         "weight": row["weight"],
         "passages": row["passages"],
         "kinds": list(dict.fromkeys(
             relation_name(kind, reversed_=backward) for kind, backward in zip(row["kinds"], row["backwards"],
                                                                               strict=True) if kind
         ))}
        for row in rows
    ]  # fmt: skip


def entity_mentions(entity: GraphEntity, limit: int = 30) -> list[GraphMention]:
    """The passages mentioning an entity most, with their documents (its own tenant and version)."""
    mentions = GraphMention.objects.filter(
        tenant_id=entity.tenant_id, kb_version_id=entity.kb_version_id, entity=entity
    )
    return list(mentions.select_related("chunk__document").order_by("-count", "chunk_id")[:limit])


def community_chunks(community: GraphCommunity) -> list[Chunk]:
    """A community's supporting passages with their documents, in its order (its own tenant and version)."""
    chunks = Chunk.objects.filter(
        tenant_id=community.tenant_id, kb_version_id=community.kb_version_id, pk__in=community.chunk_ids
    ).select_related("document")
    by_id = {chunk.pk: chunk for chunk in chunks}
    return [by_id[chunk_id] for chunk_id in community.chunk_ids if chunk_id in by_id]
