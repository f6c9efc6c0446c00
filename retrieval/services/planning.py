"""What a search will run, decided before any leg does: its settings, model groups, query variants
and retriever weights."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from engines.analysis import detect_language
from knowledge.selectors.search import SearchedKnowledge, SearchedVersion, SynonymRule
from retrieval.errors import QueryVectorMismatch, QueryVectorNotApplicable
from retrieval.expansion import expand_query
from retrieval.tuning import FusionSettings, effective_settings
from retrieval.types import RETRIEVERS, Expansion, ModelGroup, Notice, SearchRequest, Weights
from tenants.models import Tenant

# The codes of ``retriever_weights``'s notice on the query's language (``notices`` of a response; docs/api.md).
DENSE_SKIPPED_LANGUAGE = "dense_skipped_language"  # DENSE_WEIGHT_FLOOR 0: the dense leg does not run
DENSE_WEIGHTED_LANGUAGE = "dense_weighted_language"  # turned down to DENSE_WEIGHT_FLOOR


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


def caller_vector(request: SearchRequest, groups: list[ModelGroup]) -> np.ndarray | None:
    """The caller's query vector as the dense leg searches it (unit length, float32), checked against
    the searched versions: one model, the one it names, and that model's dimension. None: the service
    embeds the query."""
    given = request.query_vector
    if given is None:
        return None
    if request.mode not in ("vector", "hybrid"):
        raise QueryVectorNotApplicable(f"query_vector needs a dense leg; mode {request.mode} has none")
    models = sorted({group.model_name for group in groups})
    if len(models) > 1:
        raise QueryVectorMismatch(
            f"the searched knowledge bases use different embedding models ({', '.join(models)}): one query "
            "vector cannot serve them; search them separately or send the query text alone",
            details={"models": models},
        )
    vector = np.asarray(given.values, dtype=np.float64)
    for group in groups:
        if group.model_name != given.model:
            raise QueryVectorMismatch(
                f"query_vector is from model {given.model!r}; the searched knowledge bases use {group.model_name!r}",
                details={"expected_model": group.model_name, "model": given.model},
            )
        if group.dimension != len(vector):
            raise QueryVectorMismatch(
                f"query_vector has {len(vector)} dimensions; model {group.model_name!r} makes {group.dimension}",
                details={"expected_dimension": group.dimension, "dimension": len(vector)},
            )
    vector = vector / np.abs(vector).max()  # first, so that no square overflows (the serializer refused zeros)
    unit: np.ndarray = (vector / np.linalg.norm(vector)).astype(np.float32)
    return unit


def expand(
    tenant: Tenant, request: SearchRequest, version_ids: tuple[int, ...], synonyms: tuple[SynonymRule, ...]
) -> Expansion:
    """The query variants to search, the original first. ``expand_query`` turns whatever an expander
    raises into a degradation itself (stage ``expand``, naming the expander)."""
    expansion = expand_query(
        request.query, tenant=tenant, version_ids=version_ids, synonyms=synonyms, options=request.expand
    )
    return Expansion(expansion.variants, expansion.degraded)


def retriever_weights(request: SearchRequest, groups: list[ModelGroup], fusion: FusionSettings) -> Weights:
    """Each retriever's weight (0: it does not run); dense retrieval is turned down to the floor when
    the query's language is one no searched model covers."""
    mode = request.mode
    weights = {name: (fusion.weights[name] if mode in (name, "hybrid") else 0.0) for name in RETRIEVERS}
    if mode == "hybrid" and not request.graph and "graph" not in (request.weights or {}):
        weights["graph"] = 0.0  # three-way hybrid is asked for: "graph": true or a graph weight
    notices = []
    if mode == "hybrid" and weights["vector"] > 0 and groups:
        language = detect_language(request.query)
        uncovered = [g for g in groups if g.languages and language not in g.languages]
        if len(uncovered) == len(groups):
            weights["vector"] = min(weights["vector"], fusion.dense_weight_floor)
            models = ", ".join(sorted({g.model_name for g in uncovered}))
            skipped = weights["vector"] == 0
            action = "skipped" if skipped else f"weighted {weights['vector']}"
            notices.append(
                Notice(
                    "vector",
                    DENSE_SKIPPED_LANGUAGE if skipped else DENSE_WEIGHTED_LANGUAGE,
                    f"dense retrieval {action}: the query is in '{language}', which the embedding model ({models}) "
                    "does not cover",
                )
            )
    return Weights(weights, [notice.message for notice in notices], notices)
