"""Rebuilding a version's knowledge graph from its chunk rows (``manage.py rebuild_graph``); ingestion
writes the graph of each chunk as it goes (``knowledge.ingestion.pipeline``)."""

from __future__ import annotations

from collections import Counter
from itertools import islice

from django.db import transaction
from django.db.models import F, QuerySet

from engines.graph_extraction import common_names
from graph.extraction import entity_extractor_for_tenant, triple_extractor
from knowledge.errors import VersionConflict
from knowledge.models import Chunk, KnowledgeBaseVersion, current_graph_extractor
from knowledge.stores import graph_store

GRAPH_REBUILD_BATCH = 500  # passages re-extracted and written per transaction


def rebuild_graph(version: KnowledgeBaseVersion) -> int:
    """Re-extract the graph of every chunk of a version with the current extractor (after
    ``EXTRACTOR_VERSION`` changed, or to repair it), ``GRAPH_REBUILD_BATCH`` chunks per transaction,
    then record the extractor on the version; returns the number of chunks. The names in a large share
    of the version's passages are no entities of it (``version_common_names``: one more extraction
    pass). Its communities are the caller's next step (``graph.community_build.rebuild_communities``).

    With ``GRAPH_LLM_TRIPLES`` on it refuses: the LLM's typed relations come from ingestion, and a
    rebuild would replace them by co-occurrence; build a new version instead."""
    if triple_extractor() is not None:
        raise VersionConflict(
            "GRAPH_LLM_TRIPLES is on: typed relations come from the LLM at ingestion; build a new version instead"
        )
    tenant_id = version.knowledge_base.tenant_id
    chunks = Chunk.objects.filter(kb_version=version, tenant_id=tenant_id)
    count = _reextract(version, chunks, common=version_common_names(version))
    KnowledgeBaseVersion.objects.filter(pk=version.pk).update(
        graph_extractor=current_graph_extractor(), revision=F("revision") + 1
    )
    return count


def reextract_chunks(version: KnowledgeBaseVersion, chunk_ids: list[int]) -> int:
    """Re-extract the graph of these chunks of a version (a curator's edit: ``graph.curation``)
    in one transaction. Their graph is forgotten first, then written anew, so an entity only they
    mentioned is written again with its curated label."""
    tenant_id = version.knowledge_base.tenant_id
    with transaction.atomic():
        graph_store().delete(tenant_id, version.pk, chunk_ids)
        return _reextract(version, Chunk.objects.filter(kb_version=version, tenant_id=tenant_id, pk__in=chunk_ids),
                          replace=False)  # fmt: skip


def version_common_names(version: KnowledgeBaseVersion) -> frozenset[str]:
    """The names in a large share of the version's passages (``engines.graph_extraction.common_names``),
    counted by extracting every passage once."""
    tenant_id = version.knowledge_base.tenant_id
    extractor = entity_extractor_for_tenant(tenant_id, version.knowledge_base_id)
    rows = Chunk.objects.filter(kb_version=version, tenant_id=tenant_id).values_list("content", flat=True)
    frequency: Counter[str] = Counter()
    passages = 0
    for content in rows.iterator(chunk_size=2000):
        frequency.update(entity.name for entity in extractor.extract(content).entities)
        passages += 1
    return common_names(frequency, passages)


def _reextract(
    version: KnowledgeBaseVersion,
    chunks: QuerySet[Chunk],
    *,
    replace: bool = True,
    common: frozenset[str] = frozenset(),
) -> int:
    """Extract ``chunks`` with the KB's extractor (its tenant's vocabulary, its curator's rules, without
    the ``common`` names) and write their graph, ``GRAPH_REBUILD_BATCH`` per transaction (``replace``:
    forgetting what they held)."""
    tenant_id = version.knowledge_base.tenant_id
    extractor = entity_extractor_for_tenant(tenant_id, version.knowledge_base_id, common)
    rows = chunks.order_by("id").values_list("id", "content").iterator(chunk_size=2000)
    batches = (
        {chunk_id: extractor.extract(content) for chunk_id, content in batch}
        for batch in iter(lambda: list(islice(rows, GRAPH_REBUILD_BATCH)), [])
    )
    store = graph_store()
    if replace:
        return store.build_version(tenant_id, version.pk, batches)
    count = 0
    for graphs in batches:
        store.write(tenant_id, version.pk, graphs)
        count += len(graphs)
    return count
