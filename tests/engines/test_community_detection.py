"""Leiden communities of an entity graph, their hierarchy, and extractive summaries (plain data)."""

from __future__ import annotations

import itertools

from engines.community_detection import _louvain, _partition, detect_communities, extractive_summary, split_sentences


def clique(members: range, weight: float = 1.0) -> list[tuple[int, int, float]]:
    return [(a, b, weight) for a, b in itertools.combinations(members, 2)]


def ring_of_triangles(count: int = 40) -> list[tuple[int, int, float]]:
    """Triangles in a ring, each tied to the next by one edge: modularity over the whole ring merges
    neighbouring triangles (its resolution limit); inside one merged community they stand apart."""
    edges = []
    for t in range(count):
        edges += clique(range(3 * t, 3 * t + 3))
        edges.append((3 * t + 2, 3 * ((t + 1) % count), 1.0))
    return edges


def test_level_zero_finds_the_dense_groups_and_ranks_members_by_centrality():
    edges = clique(range(5)) + clique(range(10, 15)) + [(0, 10, 0.1), (0, 1, 5.0)]
    top = [p for p in detect_communities(edges, levels=1, split_size=100) if p.level == 0]
    assert sorted(sorted(p.members) for p in top) == [[0, 1, 2, 3, 4], [10, 11, 12, 13, 14]]
    first = next(p for p in top if 0 in p.members)
    assert first.members[:2] == (0, 1) or first.members[:2] == (1, 0)  # the heavy edge makes them central
    assert list(first.centrality) == sorted(first.centrality, reverse=True)
    assert [p.number for p in top] == [0, 1] and all(p.parent is None for p in top)


def test_big_communities_split_into_a_level_below_naming_their_parent():
    partitions = detect_communities(ring_of_triangles(), levels=2, split_size=4)
    top = {p.number: set(p.members) for p in partitions if p.level == 0}
    below = [p for p in partitions if p.level == 1]
    assert below, partitions
    assert all(len(members) > 3 for members in top.values())
    for child in below:
        assert set(child.members) < top[child.parent]  # strictly inside its parent
        assert len(child.members) == 3 and max(child.members) - min(child.members) == 2  # one triangle
    numbers = [p.number for p in below]
    assert numbers == list(range(len(below)))  # unique per level


def test_a_community_leiden_cannot_split_gets_no_child_and_small_groups_are_left_out():
    edges = clique(range(6)) + [(10, 11, 1.0)]
    partitions = detect_communities(edges, levels=3, split_size=2, min_size=3)
    assert [(p.level, sorted(p.members)) for p in partitions] == [(0, [0, 1, 2, 3, 4, 5])]


def test_a_rebuild_of_the_same_graph_gives_the_same_communities():
    edges = ring_of_triangles()
    assert detect_communities(edges, levels=2, split_size=4) == detect_communities(edges[::-1], levels=2, split_size=4)


def test_louvain_fallback_finds_the_same_groups_as_leiden_on_a_clear_graph():
    edges = clique(range(5)) + clique(range(5, 10)) + [(0, 5, 0.05)]
    adjacency: dict[int, dict[int, float]] = {}
    for a, b, weight in edges:
        adjacency.setdefault(a, {})[b] = weight
        adjacency.setdefault(b, {})[a] = weight
    nodes = sorted(adjacency)
    leiden = sorted(sorted(group) for group in _partition(nodes, adjacency, 1.0))
    louvain = sorted(sorted(group) for group in _louvain(nodes, [(a, b, w) for a, b, w in edges], 1.0))
    assert leiden == louvain == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]


def test_sentences_split_on_chinese_and_latin_ends():
    assert split_sentences("PPR-9087 是门锁。It has a battery! 1.5 inch screen. 锂电池；ok") == [
        "PPR-9087 是门锁。", "It has a battery!", "1.5 inch screen.", "锂电池；", "ok"
    ]  # fmt: skip


def test_extractive_summary_names_the_key_entities_then_the_sentences_covering_most_of_them():
    passages = [
        "The PPR-9087 uses the PPR-9087-BAT battery pack. Shipping is free.",
        "Keep the battery pack cool. The PPR-9087 lock was recalled for its battery pack.",
    ]
    keys = [("ppr-9087", "PPR-9087"), ("battery pack", "Battery Pack"), ("recall", "Recall")]
    summary = extractive_summary(keys, passages, sentences=2, max_chars=500)
    assert summary.startswith("Key entities: PPR-9087, Battery Pack, Recall.")
    assert "Shipping is free." not in summary  # covers no key entity
    assert "The PPR-9087 uses the PPR-9087-BAT battery pack." in summary
    assert "The PPR-9087 lock was recalled for its battery pack." in summary
    assert "Keep the battery pack cool." not in summary  # covers fewer than the two kept
    short = extractive_summary(keys, passages, sentences=2, max_chars=40)
    assert len(short) == 40 and short.endswith("…")
