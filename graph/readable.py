"""What of the graph a reader may be shown: entities and relations learned from passages it may read.

The graph is extracted from every passage of a version, readable or not. When a search's reader may not
read some passages (docs/permissions.md, "The graph"), an entity is shown, walked through or counted as a
query entity only if a passage the reader may read mentions it, and a step of a path only if one such
passage mentions both its ends. Anything else is treated as absent from the graph: failing closed, an
entity whose readable mentions lie beyond the ``MENTIONS_CHECKED`` passages mentioning it most is
absent too.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from engines.base import GraphScope, GraphStore, ReachedEntity

MENTIONS_CHECKED = 200  # per entity: the passages mentioning it most that are checked against the reader

# chunk ids -> those of them the reader may read (the reader's ACL check on the chunk rows)
ReadableChunks = Callable[[list[int]], Collection[int]]


class ReadableGraph:
    """The readable mentions of some entities, read once per search from the graph store."""

    def __init__(self, store: GraphStore, scope: GraphScope, entity_ids: Iterable[int], readable: ReadableChunks):
        wanted = sorted(set(entity_ids))
        rows = store.mentions(scope, wanted, MENTIONS_CHECKED) if wanted else []
        chunks = list({chunk for _, chunk, _ in rows})
        allowed = set(readable(chunks)) if chunks else set()
        self.passages: dict[int, set[int]] = {}
        for entity, chunk, _ in rows:
            if chunk in allowed:
                self.passages.setdefault(entity, set()).add(chunk)

    def named(self, entity_id: int) -> bool:
        """A passage the reader may read mentions the entity."""
        return entity_id in self.passages

    def related(self, a: int, b: int) -> bool:
        """A passage the reader may read mentions both entities (where their relation can come from)."""
        return not self.passages.get(a, set()).isdisjoint(self.passages.get(b, set()))

    def walk(self, reached: ReachedEntity) -> bool:
        """Every entity of the path named and every step related for the reader."""
        return all(map(self.named, reached.path)) and all(
            self.related(a, b) for a, b in zip(reached.path, reached.path[1:], strict=False)
        )
