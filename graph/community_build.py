"""Service: the communities of a KB version's entity graph, each with a summary (GraphRAG's global side).

A task runs it after each ingestion and version build (``graph.tasks.detect_communities``), and
``manage.py graph_communities [--tenant T] [--kb K]`` on demand. It reads the version's graph from the graph store, finds the
Leiden hierarchy (``engines.community_detection``), picks each community's supporting passages (those
that mention its most central entities most), summarizes it (extractive: its key entities and the
passages' sentences covering the most of them; with ``GRAPH_LLM_SUMMARIES`` the chat model at
``LLM_URL`` writes it instead, for at most ``GRAPH_LLM_MAX_SUMMARIES`` communities, and the first
failure leaves the rest extractive), analyzes and embeds the summaries, and replaces the version's
communities in one write.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.conf import settings

from core.cost import charged_to
from engines.base import Community, GraphNode, GraphScope
from engines.community_detection import Partition, detect_communities, extractive_summary
from engines.embedders import get_embedder
from engines.llm import LLMError, chat_client
from knowledge.models import Chunk, KnowledgeBaseVersion
from knowledge.selectors.search import analyzer_for_tenant
from knowledge.stores import graph_store

KEY_ENTITIES = 8  # the most central entities named in a summary and used to pick its passages
SUPPORTING_CHUNKS = 5  # passages kept per community
SUMMARY_SENTENCES = 3
SUMMARY_MAX_CHARS = 800
LLM_SUMMARY_PROMPT = (
    "You summarize one community of related entities of a knowledge base, for corpus-wide questions. In two "
    "to four sentences, in the language of the passages, say what the community is about and how its key "
    "entities relate. Reply with the summary only."
)

logger = logging.getLogger(__name__)


def rebuild_communities(version: KnowledgeBaseVersion) -> int:
    """Replace the version's communities with those of its current graph; returns how many there are.
    Charged to the version's tenant (``core.cost``): the summaries' embedding and LLM tokens."""
    tenant_id = version.knowledge_base.tenant_id
    with charged_to(tenant_id):
        return _rebuild_communities(version, tenant_id)


def _rebuild_communities(version: KnowledgeBaseVersion, tenant_id: int) -> int:
    store = graph_store()
    scope = GraphScope(tenant_id, (version.pk,))
    partitions = detect_communities(
        store.edges(tenant_id, version.pk),
        levels=settings.GRAPH_COMMUNITY_LEVELS,
        split_size=settings.GRAPH_COMMUNITY_SPLIT_SIZE,
        min_size=settings.GRAPH_COMMUNITY_MIN_SIZE,
        resolution=settings.GRAPH_COMMUNITY_RESOLUTION,
    )
    keys = sorted({entity for partition in partitions for entity in partition.members[:KEY_ENTITIES]})
    nodes = {node.entity_id: node for node in store.entities(scope, keys)}
    mentions: dict[int, list[int]] = {}
    for entity, chunk, _ in store.mentions(scope, keys, SUPPORTING_CHUNKS):
        mentions.setdefault(entity, []).append(chunk)
    supporting = [_supporting_chunks(partition, mentions) for partition in partitions]
    texts = dict(
        Chunk.objects.filter(
            tenant_id=tenant_id, kb_version=version, pk__in={c for ids in supporting for c in ids}
        ).values_list("id", "content")
    )
    summaries = [
        extractive_summary(
            [(nodes[e].name, nodes[e].label) for e in partition.members[:KEY_ENTITIES]],
            (texts[chunk] for chunk in chunks if chunk in texts),
            sentences=SUMMARY_SENTENCES,
            max_chars=SUMMARY_MAX_CHARS,
        )
        for partition, chunks in zip(partitions, supporting, strict=True)
    ]
    if settings.GRAPH_LLM_SUMMARIES and settings.LLM_URL:
        summaries = _llm_summaries(partitions, supporting, texts, nodes, summaries)
    analyzer = analyzer_for_tenant(tenant_id)
    vectors: Iterable[Iterable[float]] = (
        get_embedder(version.embedding_model).embed_documents(summaries) if summaries else []
    )
    communities = [
        Community(
            version_id=version.pk,
            level=partition.level,
            number=partition.number,
            parent=partition.parent,
            entity_ids=partition.members,
            key_entities=tuple(nodes[e].label for e in partition.members[:KEY_ENTITIES]),
            summary=summary,
            analyzed=analyzer.analyze(summary),
            chunk_ids=tuple(chunk for chunk in chunks if chunk in texts),
            embedding=tuple(float(x) for x in vector),
        )
        for partition, chunks, summary, vector in zip(partitions, supporting, summaries, vectors, strict=True)
    ]
    store.replace_communities(tenant_id, version.pk, communities)
    return len(communities)


def _llm_summaries(
    partitions: list[Partition],
    supporting: list[list[int]],
    texts: dict[int, str],
    nodes: dict[int, GraphNode],
    extractive: list[str],
) -> list[str]:
    """The chat model's summaries of the first ``GRAPH_LLM_MAX_SUMMARIES`` communities (the key entities
    named first, as the extractive ones do); the others, and every one after a failure, stay extractive."""
    summaries = list(extractive)
    for index, (partition, chunks) in enumerate(zip(partitions, supporting, strict=True)):
        if index >= settings.GRAPH_LLM_MAX_SUMMARIES:
            break
        labels = [nodes[e].label for e in partition.members[:KEY_ENTITIES]]
        passages = "\n\n".join(texts[chunk] for chunk in chunks if chunk in texts)
        payload = {
            "model": settings.LLM_MODEL,
            "messages": [
                {"role": "system", "content": LLM_SUMMARY_PROMPT},
                {"role": "user", "content": f"Key entities: {', '.join(labels)}\n\nPassages:\n{passages}"},
            ],
            "temperature": 0,
            "max_tokens": 300,
        }
        try:
            content = chat_client.complete(
                settings.LLM_URL, settings.LLM_API_KEY, payload,
                timeout_s=settings.LLM_TIMEOUT_S, deadline_s=settings.GRAPH_LLM_DEADLINE_S, purpose="summaries",
            )  # fmt: skip
        except LLMError as exc:
            logger.warning(
                "community summaries by the LLM failed: the rest stay extractive",
                extra={"cause": exc.cause, "detail": exc.message},
            )
            break
        if content.strip():
            text = f"Key entities: {', '.join(labels)}. {content.strip()}"
            summaries[index] = text if len(text) <= SUMMARY_MAX_CHARS else text[: SUMMARY_MAX_CHARS - 1] + "…"
    return summaries


def _supporting_chunks(partition: Partition, mentions: dict[int, list[int]]) -> list[int]:
    """The passages that mention the community's most central entities: an entity ranked i adds
    1 / (1 + i) to each of its passages; the best ``SUPPORTING_CHUNKS``."""
    scores: dict[int, float] = {}
    for rank, entity in enumerate(partition.members[:KEY_ENTITIES]):
        for chunk in mentions.get(entity, []):
            scores[chunk] = scores.get(chunk, 0.0) + 1 / (1 + rank)
    return sorted(scores, key=lambda chunk: (-scores[chunk], chunk))[:SUPPORTING_CHUNKS]
