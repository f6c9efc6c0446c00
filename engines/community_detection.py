"""Communities of an entity graph (GraphRAG's hierarchy) and their extractive summaries; plain data.

Level 0 partitions the whole graph with Leiden (``leidenalg`` over ``python-igraph``, weighted
modularity, a fixed seed so a rebuild of the same graph gives the same communities); each level-0
community larger than ``split_size`` is partitioned again on its own subgraph into level 1, and so on
up to ``levels``. Without leidenalg, networkx's Louvain does the same. Entities without a relation, and
communities smaller than ``min_size``, belong to no community; a community Leiden does not split has no children.

The default summary is extractive: the community's most central entities (weighted degree inside it),
then the sentences of its passages that cover the most of them (an entity ranked i counts 1 / (1 + i)).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from engines.analysis import normalize

SEED = 42
_SENTENCE_END = re.compile(r"(?<=[。！？；!?])|(?<=[.;])\s+|\n+")


@dataclass(frozen=True)
class Partition:
    level: int
    number: int  # unique per level: the bigger communities first
    parent: int | None  # the number of the level-above community that holds it
    members: tuple[int, ...]  # entity ids, the most central first
    centrality: tuple[float, ...]  # each member's weighted degree inside the community


def detect_communities(
    edges: list[tuple[int, int, float]], *, levels: int, split_size: int, min_size: int = 2, resolution: float = 1.0
) -> list[Partition]:
    """The hierarchy of communities of an undirected weighted graph given as (a, b, weight) edges;
    communities of fewer than ``min_size`` entities are left out."""
    adjacency: dict[int, dict[int, float]] = defaultdict(dict)
    for a, b, weight in edges:
        if a != b:
            adjacency[a][b] = adjacency[a].get(b, 0.0) + weight
            adjacency[b][a] = adjacency[b].get(a, 0.0) + weight
    partitions: list[Partition] = []
    parents: list[tuple[int | None, list[int]]] = [(None, sorted(adjacency))]
    for level in range(levels):
        groups: list[tuple[int | None, list[int]]] = []
        for parent, nodes in parents:
            if parent is not None and len(nodes) <= split_size:
                continue  # small enough: not split further
            found = [group for group in _partition(nodes, adjacency, resolution) if len(group) >= max(min_size, 2)]
            if parent is not None and len(found) == 1 and len(found[0]) == len(nodes):
                continue  # one community again: no finer level here
            groups += [(parent, group) for group in found]
        groups.sort(key=lambda item: (-len(item[1]), min(item[1])))
        for number, (parent, group) in enumerate(groups):
            members = set(group)
            degree = {node: sum(w for other, w in adjacency[node].items() if other in members) for node in group}
            ranked = sorted(group, key=lambda node: (-degree[node], node))
            partitions.append(Partition(level, number, parent, tuple(ranked), tuple(degree[n] for n in ranked)))
        parents = [(p.number, list(p.members)) for p in partitions if p.level == level]
        if not parents:
            break
    return partitions


def _partition(nodes: list[int], adjacency: dict[int, dict[int, float]], resolution: float) -> list[list[int]]:
    """Leiden on the subgraph of ``nodes`` (networkx's Louvain when leidenalg is not installed)."""
    if len(nodes) < 2:
        return [nodes]
    index = {node: position for position, node in enumerate(nodes)}
    edges = [(index[a], index[b], weight) for a in nodes for b, weight in adjacency[a].items() if b in index and a < b]
    try:
        import igraph
        import leidenalg
    except ImportError:
        return _louvain(nodes, edges, resolution)
    graph = igraph.Graph(n=len(nodes), edges=[(a, b) for a, b, _ in edges])
    graph.es["weight"] = [weight for _, _, weight in edges]
    found = leidenalg.find_partition(
        graph,
        leidenalg.RBConfigurationVertexPartition,
        weights="weight",
        resolution_parameter=resolution,
        seed=SEED,
    )
    return [[nodes[position] for position in community] for community in found]


def _louvain(nodes: list[int], edges: list[tuple[int, int, float]], resolution: float) -> list[list[int]]:
    import networkx

    graph = networkx.Graph()
    graph.add_nodes_from(range(len(nodes)))
    graph.add_weighted_edges_from(edges)
    found = networkx.community.louvain_communities(graph, weight="weight", resolution=resolution, seed=SEED)
    return [[nodes[position] for position in sorted(community)] for community in found]


def split_sentences(text: str) -> list[str]:
    return [sentence.strip() for sentence in _SENTENCE_END.split(text) if sentence and sentence.strip()]


def extractive_summary(
    key_entities: list[tuple[str, str]], passages: Iterable[str], *, sentences: int, max_chars: int
) -> str:
    """``key_entities``: (normalized name, label), the most central first. The labels, then the best
    covering sentences (each once, in the order chosen), cut to ``max_chars``."""
    scored: dict[str, float] = {}
    for passage in passages:
        for sentence in split_sentences(passage):
            folded = normalize(sentence)
            score = sum(1 / (1 + rank) for rank, (name, _) in enumerate(key_entities) if name in folded)
            if score > 0 and score > scored.get(sentence, 0.0):
                scored[sentence] = score
    best = sorted(scored, key=lambda sentence: (-scored[sentence], len(sentence), sentence))[:sentences]
    text = "Key entities: " + ", ".join(label for _, label in key_entities) + "."
    if best:
        text += " " + " ".join(best)
    return text if len(text) <= max_chars else text[: max_chars - 1].rstrip() + "…"
