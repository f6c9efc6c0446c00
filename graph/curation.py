"""A curator's edits of a knowledge base's graph: merge, rename or delete an entity.

An edit is kept as a rule (``GraphEntityRule``, one per KB and entity name) that every extraction of
the KB's passages applies (``graph.extraction.entity_extractor_for_tenant``): ingestion, a new version's
build and ``rebuild_graph``, so it holds through re-ingestion. It is applied at once, too: the passages
that mention the entity, in every version of the KB, are re-extracted with the rules and their graph
replaced (``graph.build.reextract_chunks``); the versions' communities are recomputed after.
"""

from __future__ import annotations

from typing import Protocol

from django.db import transaction

from engines.analysis import normalize
from engines.base import GraphScope
from graph.build import reextract_chunks
from graph.extraction import graph_curation, triple_extractor
from knowledge.errors import VersionConflict
from knowledge.models import GraphEntityRule, KnowledgeBaseVersion
from knowledge.queue import enqueue
from knowledge.stores import graph_store

MAX_NAME_CHARS = 200  # GraphEntityRule's columns


class CuratedEntity(Protocol):
    """An entity of one KB version, wherever the graph lives: a PostgreSQL row (``GraphEntity``) or what
    the console reads from the graph store (``graph.selectors.BrowsedEntity``)."""

    @property
    def tenant_id(self) -> int: ...
    @property
    def kb_version_id(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def label(self) -> str: ...


def merge_entity(entity: CuratedEntity, into: CuratedEntity) -> GraphEntityRule:
    """From now on ``entity`` is ``into``: its passages mention ``into``, its relations are ``into``'s."""
    if into.tenant_id != entity.tenant_id or _kb_id(into) != _kb_id(entity):
        raise VersionConflict("an entity merges only into another entity of its own knowledge base")
    if into.name == entity.name or graph_curation([_kb_id(entity)]).resolve(into.name) == entity.name:
        raise VersionConflict(f"{entity.label!r} cannot merge into itself")
    return _apply(entity, GraphEntityRule.Action.MERGE, target=into.name, names=[entity.name, into.name])


def rename_entity(entity: CuratedEntity, label: str) -> GraphEntityRule:
    """From now on ``entity`` is shown as ``label`` and found by it (its name is ``label`` normalized)."""
    label = " ".join(label.split())[:MAX_NAME_CHARS]
    new_name = normalize(label).strip()
    if not new_name:
        raise VersionConflict("an entity's new name cannot be empty")
    return _apply(entity, GraphEntityRule.Action.RENAME, target=new_name, label=label, names=[entity.name])


def delete_entity(entity: CuratedEntity) -> GraphEntityRule:
    """From now on no passage of the KB mentions ``entity``: it and its relations are gone for good."""
    return _apply(entity, GraphEntityRule.Action.DELETE, names=[entity.name])


def _kb_id(entity: CuratedEntity) -> int:
    return KnowledgeBaseVersion.objects.values_list("knowledge_base_id", flat=True).get(pk=entity.kb_version_id)


def _apply(
    entity: CuratedEntity, action: str, *, names: list[str], target: str = "", label: str = ""
) -> GraphEntityRule:
    """Keep the rule, then re-extract the passages mentioning ``names`` in each version of the KB."""
    if triple_extractor() is not None:  # re-extraction would replace the passages' LLM relations
        raise VersionConflict(
            "GRAPH_LLM_TRIPLES is on: typed relations come from the LLM at ingestion; curate with it off"
        )
    kb_id = _kb_id(entity)
    with transaction.atomic():
        rule, _ = GraphEntityRule.objects.update_or_create(
            knowledge_base_id=kb_id, name=entity.name,
            defaults={"tenant_id": entity.tenant_id, "action": action, "target": target, "label": label},
        )  # fmt: skip
        versions = KnowledgeBaseVersion.objects.filter(knowledge_base_id=kb_id).exclude(
            status=KnowledgeBaseVersion.Status.FAILED
        )
        store = graph_store()
        for version in versions:
            scope = GraphScope(entity.tenant_id, (version.pk,))
            found = store.find_entities(scope, names)
            per_entity = max((node.chunk_count for node in found), default=0)
            mentions = store.mentions(scope, [node.entity_id for node in found], per_entity) if found else []
            chunk_ids = sorted({chunk_id for _, chunk_id, _ in mentions})
            if chunk_ids:
                reextract_chunks(version, chunk_ids)
                enqueue("graph.tasks.detect_communities", (version.pk,), robust=True)
    return rule
