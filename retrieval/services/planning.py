"""What a search will run, decided before any leg does: its settings, model groups, query variants
and retriever weights."""

from __future__ import annotations

from collections.abc import Iterable

from engines.analysis import detect_language
from knowledge.selectors import SearchedKnowledge, SearchedVersion, SynonymRule
from retrieval.expansion import expand_query
from retrieval.tuning import FusionSettings, effective_settings
from retrieval.types import RETRIEVERS, Expansion, ModelGroup, SearchRequest, Weights
from tenants.models import Tenant


def searched_settings(request: SearchRequest, knowledge: SearchedKnowledge) -> FusionSettings:
    """The fusion settings a search runs with: the request's, its KBs', the service's (``retrieval.tuning``)."""
    return effective_settings(request, [version.search_settings for version in knowledge.versions])


def model_groups(versions: Iterable[SearchedVersion]) -> list[ModelGroup]:
    """The searched versions grouped by embedding model, in the KBs' order."""
    grouped: dict[tuple[str, int], list[SearchedVersion]] = {}
    for version in versions:
        grouped.setdefault((version.embedding_model, version.embedding_dim), []).append(version)
    return [
        ModelGroup(
            model, dim, members[0].languages, tuple(v.version_id for v in members), tuple(v.revision for v in members)
        )
        for (model, dim), members in grouped.items()
    ]


def expand(
    tenant: Tenant, request: SearchRequest, version_ids: tuple[int, ...], synonyms: tuple[SynonymRule, ...]
) -> Expansion:
    """The query variants to search, the original first. ``expand_query`` turns whatever an expander
    raises into a degradation itself (stage ``expand``, naming the expander)."""
    expansion = expand_query(
        request.query, tenant=tenant, version_ids=version_ids, synonyms=synonyms, options=request.expand
    )
    return Expansion(expansion.variants, expansion.degraded)


def weigh(request: SearchRequest, groups: list[ModelGroup], fusion: FusionSettings) -> Weights:
    """Each retriever's weight (0: it does not run); dense retrieval is turned down to the floor when
    the query's language is one no searched model covers."""
    mode = request.mode
    weights = {name: (fusion.weights[name] if mode in (name, "hybrid") else 0.0) for name in RETRIEVERS}
    if mode == "hybrid" and not request.graph and "graph" not in (request.weights or {}):
        weights["graph"] = 0.0  # three-way hybrid is asked for: "graph": true or a graph weight
    notes = []
    if mode == "hybrid" and weights["vector"] > 0 and groups:
        language = detect_language(request.query)
        uncovered = [g for g in groups if g.languages and language not in g.languages]
        if len(uncovered) == len(groups):
            weights["vector"] = min(weights["vector"], fusion.dense_weight_floor)
            models = ", ".join(sorted({g.model_name for g in uncovered}))
            action = "skipped" if weights["vector"] == 0 else f"weighted {weights['vector']}"
            notes.append(
                f"dense retrieval {action}: the query is in '{language}', which the embedding model ({models}) "
                "does not cover"
            )
    return Weights(weights, notes)
