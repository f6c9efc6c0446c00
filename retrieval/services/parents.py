"""Parent-child chunks on the search side: the child chunks a search found counted as their parent passage.

A ``parent_child`` version indexes small child chunks; each knows its parent passage
(``knowledge.models.ParentChunk``). Fusion deduplicates a child by its parent's content hash instead of
its own, so the children of one parent are one candidate: in each ranked list its best child counts (as
a duplicate's best-ranked copy always does) and the lists add up as for any passage. Identical parents
(one passage in two documents) are one candidate, as identical chunks are. The hit shows the parent's
text and names each child that matched, with its own rank and score per retriever. A search of plain
versions only reads nothing more and ranks exactly as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from graph.ranking import GraphBridge
from retrieval import selectors
from retrieval.fusion_functions import RankedList
from tenants.models import Tenant

PARENT_KEY = "parent:"  # a child's dedup key: this, then its parent's content hash


@dataclass(frozen=True)
class ChildOf:
    """A child chunk's place: its dedup key (its parent's), its parent passage and its own ordinal."""

    key: str
    parent_id: int
    ordinal: int


@dataclass(frozen=True)
class Parents:
    """What fusion and the hits need of the children in a search's lists (empty: no parent_child version)."""

    children: dict[int, ChildOf]  # child chunk id -> its place

    @property
    def keys(self) -> dict[int, str]:
        """Child chunk id -> dedup key, over the content hashes fusion reads."""
        return {chunk_id: child.key for chunk_id, child in self.children.items()}

    def matched(self, lists: list[RankedList], key: str) -> list[dict[str, Any]]:
        """The children of the parent ``key`` that the lists found, each with its best rank and score
        per retriever (over the query variants), in the order they were first found."""
        found: dict[int, dict[str, dict[str, Any]]] = {}
        for ranked in lists:
            for rank, (chunk_id, score) in enumerate(ranked.hits, start=1):
                child = self.children.get(chunk_id)
                if child is None or child.key != key:
                    continue
                best = found.setdefault(chunk_id, {}).get(ranked.retriever)
                if best is None or rank < best["rank"]:
                    found[chunk_id][ranked.retriever] = {"rank": rank, "score": round(float(score), 6)}
        return [
            {"chunk_id": chunk_id, "ordinal": self.children[chunk_id].ordinal, "retrievers": retrievers}
            for chunk_id, retrievers in found.items()
        ]


def parents_of(
    tenant: Tenant, lists: list[RankedList], parent_child: bool, bridges: Sequence[GraphBridge] = ()
) -> Parents:
    """The parents of the lists' child chunks and of the chunks the graph's bridges leave and reach (a
    bridged child counts as its parent too), read in one round trip when a searched version is
    ``parent_child`` (else nothing is read)."""
    if not parent_child:
        return Parents({})
    chunk_ids = {chunk_id for ranked in lists for chunk_id, _ in ranked.hits}
    chunk_ids.update(chunk_id for bridge in bridges for chunk_id in (bridge.via, bridge.chunk_id))
    rows = selectors.parents_of_chunks(tenant, chunk_ids)
    return Parents(
        {chunk_id: ChildOf(PARENT_KEY + digest, parent_id, ordinal) for chunk_id, parent_id, digest, ordinal in rows}
    )
