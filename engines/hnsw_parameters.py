"""HNSW parameters chosen from the graph's size, so recall@10 holds at the defaults as a KB grows.

pgvector's build defaults (m 16, ef_construction 64) with ``ef_search`` 200 recall 0.958 at 100k chunks
but 0.729 at 1M; m 24 / ef_construction 128 with ``ef_search`` 1000 recall 0.961 there
(docs/BENCHMARKS.md, "Filtered search at 1M"). So the search list grows with the index's rows, and a
build over many rows gets the larger graph. A setting (``HNSW_EF_SEARCH``, ``HNSW_M``,
``HNSW_EF_CONSTRUCTION``) fixes its value instead.
"""

from __future__ import annotations

import math
from typing import NamedTuple

# pgvector refuses a larger hnsw.ef_search; a deeper list comes from the iterative scan, which walks on past it.
EF_SEARCH_LIMIT = 1000
# At this many rows and below, the search list is the larger of EF_SEARCH_FLOOR and twice the depth.
EF_SEARCH_REFERENCE_ROWS = 100_000
EF_SEARCH_FLOOR = 100
# Above the reference the list grows as (rows / reference) ** this: 325 at 200k (measured 0.955 at 200,
# 0.975 at 400), 1000 (the limit) at 1M for a depth of 100.
EF_SEARCH_GROWTH = 0.7


class BuildParameters(NamedTuple):
    m: int
    ef_construction: int


# (from this many rows, the build): pgvector's defaults, then the build that recalls 0.961 at 1M. At
# 300k the default build's recall is projected below 0.95 even at ef_search 1000 (0.955 at 200k with 200).
BUILD_TIERS: tuple[tuple[int, BuildParameters], ...] = (
    (0, BuildParameters(16, 64)),
    (300_000, BuildParameters(24, 128)),
)


def ef_search_for(index_rows: int, top_k: int) -> int:
    """``hnsw.ef_search`` for a walk to ``top_k`` rows in a graph of ``index_rows``."""
    base = max(EF_SEARCH_FLOOR, 2 * top_k)
    scale: float = max(1.0, index_rows / EF_SEARCH_REFERENCE_ROWS) ** EF_SEARCH_GROWTH
    return min(EF_SEARCH_LIMIT, math.ceil(base * scale))


def build_parameters_for(rows: int) -> BuildParameters:
    """m and ef_construction for a graph built over ``rows``."""
    return next(build for floor, build in reversed(BUILD_TIERS) if rows >= floor)


def needs_rebuild(built: tuple[int | None, int | None] | None, wanted: BuildParameters) -> bool:
    """Whether an index built with ``built`` (m, ef_construction; None: unknown) is a smaller graph than
    ``wanted``. An index with larger parameters, or made by hand, is left alone."""
    if built is None or None in built:
        return False
    m, ef_construction = built
    assert m is not None and ef_construction is not None
    return m < wanted.m or ef_construction < wanted.ef_construction
