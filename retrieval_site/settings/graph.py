"""The knowledge graph: its walk at query time, typed relations and communities at ingestion, its store."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt

from retrieval_site.settings.base import Ranks, Section


class Graph(Section):
    title = "Graph"

    GRAPH_HOPS: Annotated[int, Field(ge=0, le=3), Ranks] = 2  # default neighbourhood of the query's entities
    # Three-way hybrid: a passage in another leg's top N scores as the graph's first; the graph orders the rest.
    GRAPH_FUSION_HEAD: Annotated[NonNegativeInt, Ranks] = 10
    # Three-way hybrid's bridge slots: up to SLOTS passages from rank RANK on go to those one passage on from
    # a passage of the fused top HEAD that names a query entity (through an entity both mention); 0: none.
    GRAPH_BRIDGE_SLOTS: Annotated[NonNegativeInt, Ranks] = 2
    GRAPH_BRIDGE_RANK: Annotated[PositiveInt, Ranks] = 8
    GRAPH_BRIDGE_HEAD: Annotated[PositiveInt, Ranks] = 5
    GRAPH_BRIDGE_ANCHORS: Annotated[PositiveInt, Ranks] = 10  # the graph's best passages naming a query entity
    # A bridge's step: through an entity in at most HUB passages, to at most PER_ENTITY of them (most mentions first).
    GRAPH_BRIDGE_HUB_PASSAGES: Annotated[PositiveInt, Ranks] = 100
    GRAPH_BRIDGE_PER_ENTITY: Annotated[PositiveInt, Ranks] = 5
    GRAPH_HOP_DECAY: Annotated[float, Field(gt=0, le=1), Ranks] = 0.5  # score factor per hop
    GRAPH_FANOUT: Annotated[PositiveInt, Ranks] = 20  # a walk follows each entity's strongest relations only
    GRAPH_DEEP_FANOUT: Annotated[PositiveInt, Ranks] = 5  # ... and of each entity beyond the query's
    GRAPH_HUB_PASSAGES: Annotated[PositiveInt, Ranks] = 1_000  # a walk stops at entities in more passages
    GRAPH_FRONTIER: Annotated[PositiveInt, Ranks] = 20  # entities of a hop the next walks from: the best-scored
    GRAPH_MAX_ENTITIES: Annotated[PositiveInt, Ranks] = 30  # reached entities whose passages are read
    GRAPH_CHUNKS_PER_ENTITY: Annotated[PositiveInt, Ranks] = 50  # passages read per reached entity
    # A misspelt Latin name of the query finds the entity this similar (trigrams, 0-1); 0: exact names only.
    GRAPH_FUZZY_SIMILARITY: Annotated[float, Field(ge=0, le=1), Ranks] = 0.6
    # Typed relations at ingestion from the LLM (LLM_URL, LLM_MODEL): one call per document, bounded.
    GRAPH_LLM_TRIPLES: bool = False  # off: co-occurrence relations only
    GRAPH_LLM_DEADLINE_S: PositiveFloat = 30.0  # the whole call of one document
    GRAPH_LLM_MAX_INPUT_CHARS: PositiveInt = 12_000  # passages sent per document; the rest keep co-occurrence
    GRAPH_LLM_MAX_OUTPUT_TOKENS: PositiveInt = 2_000  # the answer's cap (max_tokens)
    GRAPH_LLM_SUMMARIES: bool = False  # community summaries by the LLM instead of extractive ones
    GRAPH_LLM_MAX_SUMMARIES: PositiveInt = 200  # per rebuild: the biggest communities first; the rest extractive
    # Communities (Leiden), rebuilt by a task after each ingestion and version build.
    GRAPH_COMMUNITY_LEVELS: Annotated[int, Field(ge=1, le=4)] = 2  # levels of the hierarchy
    GRAPH_COMMUNITY_SPLIT_SIZE: PositiveInt = 30  # a community above this many entities gets a level below
    GRAPH_COMMUNITY_MIN_SIZE: Annotated[int, Field(ge=2)] = 3  # smaller groups of entities are no community
    GRAPH_COMMUNITY_RESOLUTION: PositiveFloat = 1.0  # Leiden's resolution: higher, smaller communities
    NEO4J_URL: str = ""  # neo4j://user:password@host:7687: the graph in Neo4j; unset: PostgreSQL tables
    NEO4J_TIMEOUT_S: PositiveFloat = 2.0  # connect, acquire and per-query transaction deadline
