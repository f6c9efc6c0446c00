"""The three store protocols (``VectorIndex``, ``LexicalIndex``, ``GraphStore``) with the plain data they
take and give; one module per implementation beside this one, picked from settings by ``engines.registry``.

Every store answers the same verbs, as Haystack's document stores do: ``write`` (add, replacing what the
named documents or chunks held), ``delete``, ``search`` (the graph's reads are its walk: ``find_entities``,
``reach``, ``bridges``...), and the version lifecycle: ``build_version`` (make or remake a KB version's
part of the store), ``switch_version`` (searches move from one version to another) and ``drop_version``
(forget a version). A store for which one of them has nothing to do says so in its implementation."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

import numpy as np

from engines.errors import ComponentError
from engines.lexical_filter import FilterFields, LexicalFilter


@dataclass(frozen=True)
class SearchScope:
    """What a search may read: one tenant's active KB versions built with one embedding dimension."""

    tenant_id: int
    version_ids: tuple[int, ...]
    embedding_dim: int


@dataclass(frozen=True)
class SqlFilter:
    """A boolean SQL expression over the chunk table's columns with its parameters, compiled and
    parameterized by the caller; empty: every row in scope passes."""

    sql: str = ""
    params: tuple[object, ...] = ()
    # the reader's principals when ``sql`` holds their ACL check (a search may walk their reader graphs:
    # engines.principal_graphs); a hint only, never needed for the filter to hold
    principals: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.sql)


@dataclass(frozen=True)
class VectorHit:
    chunk_id: int
    score: float  # cosine similarity, higher is closer
    content_hash: str | None = None  # when the index has it at hand; fusion dedups on it


@dataclass(frozen=True, slots=True)
class ChunkRow:
    """One passage as the vector index stores it: its vector, the columns searches filter on and the
    passage itself (pgvector keeps them in one row of the chunk table; an index elsewhere keeps the
    vector and the filter fields). Plain values: ``metadata`` a JSON-able dict."""

    document_id: int
    version_id: int
    tenant_id: int
    knowledge_base_id: int
    ordinal: int
    content: str
    content_hash: str
    token_count: int
    embedding: Any  # a sequence of floats (a numpy vector)
    doc_type: str
    created_at: datetime
    tags: list[str]
    metadata: dict[str, Any]
    acl: list[str]
    parent_id: int | None = None


PlanT = TypeVar("PlanT")


class VectorIndex(ABC, Generic[PlanT]):
    """Dense search over passages' vectors, per tenant and KB version; ``PlanT`` is what ``plan`` hands
    to ``search`` (pgvector: the number of rows in scope)."""

    name: str

    @abstractmethod
    def write(self, rows: Iterable[ChunkRow]) -> None:
        """Add these passages (inside the caller's transaction where the index is in the database)."""

    @abstractmethod
    def delete(self, version_id: int, chunk_ids: list[int]) -> None:
        """Forget these passages of a version (no-op for ids it does not hold)."""

    @abstractmethod
    def build_version(self, version_id: int, *, dimension: int) -> None:
        """Make the index ready to take and search a version's vectors of ``dimension`` (idempotent)."""

    @abstractmethod
    def switch_version(self, previous_id: int | None, version_id: int) -> None:
        """Searches of a KB move from ``previous_id`` to ``version_id`` (inside the switch's transaction)."""

    @abstractmethod
    def drop_version(self, version_id: int) -> None:
        """Forget a version's vectors (no-op for a version without any)."""

    def plan(self, scope: SearchScope, filters: SqlFilter) -> PlanT | None:
        """Work that needs no query vector, done while the query embeds and handed to ``search``
        (pgvector sizes the filtered scope to choose between the graph and an exact scan)."""
        return None

    @abstractmethod
    def search(
        self,
        scope: SearchScope,
        query_vector: np.ndarray,
        top_k: int,
        filters: SqlFilter,
        plan: PlanT | None = None,
        field_filter: LexicalFilter | None = None,
    ) -> list[VectorHit]:
        """The ``top_k`` nearest chunks in scope that pass ``filters``, best first; ``plan`` is what
        ``plan()`` returned for the same scope and filters (None: the search works it out).
        ``field_filter``: the same filter as plain data when it translates exactly
        (``engines.lexical_filter``), for an index outside the database, which cannot run SQL (it refuses
        ``filters`` without it); pgvector reads ``filters``."""

    def ping(self) -> str:
        """A short description of the index when it can serve (``/ready``); raises when it cannot. The
        database's index needs no check of its own (``/ready`` checks the database and pgvector)."""
        return self.name

    @abstractmethod
    def similarities(self, scope: SearchScope, query_vector: np.ndarray, chunk_ids: list[int]) -> list[VectorHit]:
        """The chunks of ``chunk_ids`` in scope, each with its cosine to ``query_vector``, in no order: the
        dense score of passages another retriever found (the caller chose them, so no filters)."""


@dataclass(frozen=True)
class LexicalDocument:
    """One chunk as a lexical backend stores it: ``text`` is already analyzed (tokens joined by spaces);
    ``fields`` are its business fields for filters the index applies itself (``engines.lexical_filter``)."""

    chunk_id: int
    doc_id: int
    tenant_id: int
    text: str
    fields: FilterFields | None = None


@dataclass(frozen=True)
class LexicalHit:
    chunk_id: int
    score: float  # BM25; comparable only within one index


@dataclass(frozen=True)
class IndexState:
    """What built an index: a different analyzer version means the index must be rebuilt."""

    analyzer_version: str
    dictionary_fingerprint: str
    num_docs: int
    filters: bool = False  # its entries carry their business fields (built since they exist)
    acl: bool = False  # and their ACL terms (lexical_filter.FILTER_FIELDS_LEVEL 2)


BM25_K1 = 1.2  # both lexical engines score with k1 = 1.2, b = 0.75


def bm25_ceiling(
    doc_count: int, doc_frequencies: list[int], *, scale: float, weights: list[float] | None = None
) -> float:
    """The most BM25 can give these query tokens: Lucene's idf, ln(1 + (N - df + 0.5) / (df + 0.5)), of
    each token (times its query weight, when the query weighs its tokens), times ``scale`` (the engine's
    k1 + 1, or 1 where Lucene dropped it). A token no document holds counts as the rarest (df = 0): a
    passage missing query words is a weaker match, whether or not another passage has them."""
    weights = weights or [1.0] * len(doc_frequencies)
    return scale * sum(
        weight * math.log(1 + (doc_count - df + 0.5) / (df + 0.5))
        for df, weight in zip(doc_frequencies, weights, strict=True)
    )


class LexicalIndexError(ComponentError):
    """The lexical backend cannot serve (down, missing or incompatible index); ``cause`` is for ``degraded``."""


class LexicalIndex(ABC):
    """BM25 over pre-analyzed text, one index per KB version; tenant filters never change scores."""

    name: str

    @abstractmethod
    def write(
        self,
        version_id: int,
        entries: list[LexicalDocument],
        *,
        replacing: Sequence[int] = (),
        analyzer_version: str,
        dictionary_fingerprint: str,
    ) -> None:
        """Drop every entry of the documents ``replacing`` names and add ``entries``, committed together
        (the analyzer's version and fingerprint are recorded when this write creates the index)."""

    @abstractmethod
    def delete(self, version_id: int, doc_ids: Sequence[int]) -> None:
        """Drop every entry of these documents (no-op without an index)."""

    @abstractmethod
    def build_version(
        self, version_id: int, entries: Iterable[LexicalDocument], *, analyzer_version: str, dictionary_fingerprint: str
    ) -> int:
        """Replace the whole index of a version with ``entries`` (an iterable, read once); searches read
        the previous index until the new one is complete. Returns the count."""

    @abstractmethod
    def switch_version(self, previous_id: int | None, version_id: int) -> None:
        """Searches of a KB move from ``previous_id`` to ``version_id`` (inside the switch's transaction)."""

    @abstractmethod
    def drop_version(self, version_id: int) -> None:
        """Delete a version's index (no-op when absent)."""

    @abstractmethod
    def state(self, version_id: int) -> IndexState | None:
        """None when the version has no index yet."""

    @abstractmethod
    def chunk_ids(self, version_id: int) -> list[int]:
        """Every entry's chunk id (a chunk indexed twice appears twice); empty when the version has no
        index. For consistency checks against the database: one pass over a column, no scoring."""

    @abstractmethod
    def search(
        self,
        version_id: int,
        tenant_id: int,
        tokens: list[str],
        limit: int,
        allowed_chunk_ids: list[int] | None,
        weights: list[float] | None = None,
        field_filter: LexicalFilter | None = None,
    ) -> list[LexicalHit]:
        """Best ``limit`` chunks for the query tokens, restricted to ``allowed_chunk_ids`` when given
        and to the entries passing ``field_filter`` when given (only on an index whose ``state`` says
        ``filters``; otherwise it raises ``LexicalIndexError``); ``weights`` (one per token, None: 1
        each) multiply each token's BM25 contribution."""

    @abstractmethod
    def max_score(self, version_id: int, tokens: list[str], weights: list[float] | None = None) -> float:
        """The highest score any chunk of the version could reach for ``tokens`` (as ``search`` scores
        them, a repeated token twice, each times its weight): each token's BM25 weight as its frequency
        grows without bound, summed (``bm25_ceiling``). 0.0 without an index."""

    @abstractmethod
    def ping(self) -> str:
        """A short description of the backend when it can serve (for ``/ready``); raises
        ``LexicalIndexError`` when it cannot. Cheap: readiness probes call it every few seconds."""


# --- graph ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entity:
    name: str  # normalized: the key of the entity in a KB version
    label: str  # as first written
    kind: str  # person, place, organisation, proper, noun, code, name, phrase or term
    count: int  # mentions in the passage


@dataclass(frozen=True)
class Relations:
    """A passage's relations as columns, one entry per relation. A typed one is directed, source (head)
    to target (tail): "X made_by Y"; co-occurrence (kind "") is not, either end may come first. No
    object per relation: a Chinese passage has ~70 of them, and a store maps a whole batch's entity
    indices to its ids at once."""

    sources: tuple[int, ...] = ()  # an end's index in the extraction's entities
    targets: tuple[int, ...] = ()  # the other end's
    weights: tuple[float, ...] = ()
    kinds: tuple[str, ...] = ()  # each relation's kind (made_by...; "" co-occurrence); () when all are ""

    def __len__(self) -> int:
        return len(self.weights)


@dataclass(frozen=True)
class Extraction:
    """What one passage adds to its KB version's graph."""

    entities: tuple[Entity, ...]
    relations: Relations = Relations()

    @classmethod
    def by_name(cls, entities: tuple[Entity, ...], relations: Iterable[tuple[str, str, float, str]]) -> Extraction:
        """An extraction whose relations are given as (source name, target name, weight, kind), kind "" for
        co-occurrence; both names must be entities'."""
        index = {entity.name: position for position, entity in enumerate(entities)}
        rows = list(relations)
        kinds = tuple(kind for _, _, _, kind in rows)
        return cls(entities, Relations(
            tuple(index[source] for source, _, _, _ in rows), tuple(index[target] for _, target, _, _ in rows),
            tuple(weight for _, _, weight, _ in rows), kinds if any(kinds) else (),
        ))  # fmt: skip

    def named_relations(self) -> Iterator[tuple[str, str, float, str]]:
        """(source name, target name, weight, kind) per relation, in order; kind "" for co-occurrence."""
        names = [entity.name for entity in self.entities]
        relations = self.relations
        kinds = relations.kinds or ("",) * len(relations)
        for source, target, weight, kind in zip(relations.sources, relations.targets, relations.weights, kinds,
                                                strict=True):  # fmt: skip
            yield names[source], names[target], weight, kind


@dataclass(frozen=True)
class GraphScope:
    """What a graph query may read: one tenant's KB versions."""

    tenant_id: int
    version_ids: tuple[int, ...]


@dataclass(frozen=True)
class GraphNode:
    entity_id: int
    version_id: int
    name: str
    label: str
    kind: str
    chunk_count: int  # passages that mention it: the entity's document frequency


@dataclass(frozen=True)
class GraphWalk:
    """How far a walk from the query's entities goes and how much of what it reaches is read."""

    hops: int
    fanout: int  # relations followed from a query entity (the strongest first)
    deep_fanout: int  # relations followed from an entity reached in one hop or more
    hub_passages: int  # an entity mentioned in more passages is reached but not walked through
    frontier: int  # entities of a hop the next hop walks through: the best-scored (strength x idf)
    hop_decay: float  # score factor per hop
    entities: int  # the best-scored reached entities whose passages are read
    per_entity: int  # passages read per entity, those mentioning it most first


@dataclass(frozen=True)
class ReachedEntity:
    """An entity reached from a query entity, with its strongest path and the passages mentioning it most.

    ``score = strength x hop_decay ** hops x ln(1 + N / chunk_count)`` (``entity_score``), N the
    passages in scope: strong, near and specific entities first."""

    node: GraphNode
    hops: int
    strength: float  # product of the path's edge strengths w / (w + 1), in (0, 1]; a query entity has 1
    score: float
    path: tuple[int, ...]  # entity ids, the query entity first and this entity last
    labels: tuple[str, ...]  # the path's entity labels
    relations: tuple[str, ...]  # the kind of each step's relation ("": co-occurrence), len(path) - 1
    passages: tuple[tuple[int, int], ...]  # (chunk id, mentions), the most mentions first
    reversed: tuple[bool, ...]  # per step: it went from a typed relation's tail to its head (never for "")


def entity_score(strength: float, hops: int, chunk_count: int, total: int, hop_decay: float) -> float:
    """A reached entity's weight: its path's strength, decayed per hop, times its inverse document
    frequency (hubs count little)."""
    return strength * hop_decay**hops * math.log(1 + max(total, 1) / max(chunk_count, 1))


@dataclass(frozen=True)
class Community:
    """A community of a KB version's entity graph (``engines.community_detection``) with its summary.

    ``number`` is unique per version and level; ``parent`` is the number of the community one level up
    that holds it (None at level 0). ``analyzed``: the summary as the analyzer tokenizes it (BM25 over
    summaries); ``embedding``: the summary's vector by the version's model (empty when not embedded)."""

    version_id: int
    level: int
    number: int
    parent: int | None
    entity_ids: tuple[int, ...]  # the most central first
    key_entities: tuple[str, ...]  # labels of the most central entities
    summary: str
    analyzed: str
    chunk_ids: tuple[int, ...]  # supporting passages, the best first
    embedding: tuple[float, ...] = ()


@dataclass(frozen=True)
class PassageBridge:
    """One step passage to entity to passage: ``via`` mentions the entity, and so does ``chunk_id``."""

    via: int  # chunk id of the passage left
    entity_id: int
    label: str
    chunk_count: int  # the passages mentioning the entity
    chunk_id: int  # the passage reached


@dataclass(frozen=True)
class GraphNeighbour:
    """An entity related to another (the console's entity page): its relations summed over passages."""

    entity_id: int
    label: str
    kind: str
    weight: float  # summed over the passages and relation kinds relating the two
    passages: int  # (passage, relation kind) pairs relating the two
    relations: tuple[tuple[str, bool], ...]  # typed ones as (kind, reversed: read from its tail), sorted


class GraphStoreError(ComponentError):
    """The graph backend cannot serve; ``cause`` is for ``degraded``."""


class GraphStore(ABC):
    """Entities, their relations (co-occurrence, undirected; typed, directed) and their mentions in
    passages, per tenant and KB version."""

    name: str

    @abstractmethod
    def write(
        self, tenant_id: int, version_id: int, graphs: dict[int, Extraction], *, replacing: Sequence[int] = ()
    ) -> None:
        """Forget what the ``replacing`` chunks added (entities no passage mentions any more go too) and add
        each chunk's extraction in ``graphs`` (chunk id -> extraction)."""

    def delete(self, tenant_id: int, version_id: int, chunk_ids: Sequence[int]) -> None:
        """Forget what these chunks added (entities no passage mentions any more go too)."""
        if chunk_ids:
            self.write(tenant_id, version_id, {}, replacing=chunk_ids)

    def build_version(self, tenant_id: int, version_id: int, batches: Iterable[dict[int, Extraction]]) -> int:
        """Rewrite a version's graph batch by batch, each batch replacing what its chunks held (searches
        read the rest of the graph meanwhile); returns the chunks written."""
        count = 0
        for graphs in batches:
            self.write(tenant_id, version_id, graphs, replacing=list(graphs))
            count += len(graphs)
        return count

    @abstractmethod
    def switch_version(self, tenant_id: int, previous_id: int | None, version_id: int) -> None:
        """Searches of a KB move from ``previous_id`` to ``version_id`` (inside the switch's transaction)."""

    @abstractmethod
    def drop_version(self, tenant_id: int, version_id: int) -> None:
        """Forget the whole graph of a KB version (no-op for a version without one)."""

    @abstractmethod
    def find_entities(self, scope: GraphScope, names: list[str]) -> list[GraphNode]:
        """The entities in scope with one of these normalized names."""

    @abstractmethod
    def find_similar(self, scope: GraphScope, names: list[str], min_similarity: float) -> list[GraphNode]:
        """For each of ``names`` (normalized, Latin script), the entity in scope whose name is the most
        similar one and at least ``min_similarity`` (0 to 1) similar, if any: a misspelt name finds
        its entity. PostgreSQL: pg_trgm's trigram similarity; Neo4j: Lucene's fuzzy match."""

    @abstractmethod
    def entities(self, scope: GraphScope, entity_ids: list[int]) -> list[GraphNode]:
        """The entities in scope with these ids."""

    @abstractmethod
    def browse(
        self, scope: GraphScope, *, contains: str = "", kind: str = "", offset: int = 0, limit: int = 100
    ) -> tuple[int, list[GraphNode]]:
        """For the console: the entities in scope whose name or label contains ``contains`` (lowercased;
        any when "") and of ``kind`` (any when ""), as (how many match, those from ``offset`` on, at most
        ``limit``), the most mentioned first, then by id."""

    @abstractmethod
    def neighbours(self, scope: GraphScope, entity_id: int, limit: int) -> list[GraphNeighbour]:
        """For the console: an entity's ``limit`` neighbours with the greatest summed weight (then by id).
        A typed relation is read from the entity's side: ``reversed`` when the entity is its tail."""

    @abstractmethod
    def mentions(self, scope: GraphScope, entity_ids: list[int], per_entity: int) -> list[tuple[int, int, int]]:
        """(entity id, chunk id, mention count): the ``per_entity`` chunks mentioning each entity most."""

    @abstractmethod
    def bridges(
        self, scope: GraphScope, chunk_ids: list[int], hub_passages: int, per_entity: int
    ) -> list[PassageBridge]:
        """From each of these passages, through each entity it mentions that at least one other and at most
        ``hub_passages`` passages mention, to the ``per_entity`` other passages mentioning that entity most
        (then by chunk id); ordered by the passage it leaves, the entity's id and the passage reached."""

    @abstractmethod
    def reach(self, scope: GraphScope, seed_ids: list[int], walk: GraphWalk, passages: int) -> list[ReachedEntity]:
        """The ``walk.entities`` best-scored entities within ``walk.hops`` of a seed (the seeds included,
        at 0 hops), best first (then by id), each once with its strongest path (then the shortest, then
        the lowest ids) and up to ``walk.per_entity`` passages. A walk follows only the ``fanout``
        strongest relations of a seed and the ``deep_fanout`` strongest of an entity beyond it, never
        from an entity mentioned in more than ``hub_passages`` passages, and each hop only from the
        ``frontier`` entities of the hop before with the best strength x ln(1 + passages / chunk_count)
        (their strongest path's; then the lowest ids). A pair's relation kind on the
        path: its heaviest typed relation's, else "" (co-occurrence only); a walk follows a typed
        relation either way and says which (``reversed``). ``passages``: the N of the
        entities' inverse document frequency (``chunk_total``)."""

    @abstractmethod
    def chunk_total(self, scope: GraphScope) -> int:
        """How many passages the scope holds (the N of an entity's inverse document frequency)."""

    @abstractmethod
    def edges(self, tenant_id: int, version_id: int) -> list[tuple[int, int, float]]:
        """The version's entity graph as undirected edges (source id < target id, summed weight), sorted."""

    @abstractmethod
    def replace_communities(self, tenant_id: int, version_id: int, communities: list[Community]) -> None:
        """The version's communities from now on (the previous ones are forgotten)."""

    @abstractmethod
    def communities(self, scope: GraphScope, level: int | None = None) -> list[Community]:
        """The communities in scope (of one level, or every level), by version, level and number."""

    @abstractmethod
    def ping(self) -> str:
        """A short description of the backend when it can serve; raises ``GraphStoreError`` when not."""
