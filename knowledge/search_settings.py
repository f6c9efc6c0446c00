"""A knowledge base's own search settings: the fusion defaults a search of it starts from.

Stored as a small JSON object on the KB (``KnowledgeBase.search_settings``: its defaults, edited in the
admin) and on each version (``KnowledgeBaseVersion.search_settings``: what was measured on that index,
written by ``manage.py evaluate --sweep --write``; a new version built with the same model starts with
its predecessor's). Every key is optional; a search takes, per key, the request's value, else the
active version's, else the KB's, else the service setting (``retrieval.tuning``).

Keys: ``weights`` (``{"vector"|"bm25"|"graph": 0..100}``, per retriever; the graph's replaces both
``SEARCH_WEIGHT_GRAPH_HYBRID`` in three-way hybrid and ``SEARCH_WEIGHT_GRAPH`` in graph mode), ``fusion``
(``rrf``, ``relevance`` or ``minmax``: how the retrievers' lists become one, see ``retrieval.fusion_functions``),
``leg_weights`` (``evidence`` or ``fixed``: RRF's weights per query by each leg's first hit, or as configured),
``leg_candidates`` (``union`` or ``own``: BM25 and dense each rank both legs' candidates, or only their own),
``rrf_k`` (1..1000),
``candidates`` (1..200, each retriever's list depth), ``dense_weight_floor`` (0..100, the dense weight
for a query in a language the model does not cover), ``aggregate`` (``none``, ``max`` or ``sum``: how
the chunks of one document add up, see ``retrieval.grouping``), ``group_by`` (``chunk`` or
``document``) and RM3 pseudo-relevance feedback on the BM25 leg (``retrieval.expansion.rm3``):
``feedback_docs`` (0..50 first-pass passages, 0: off), ``feedback_terms`` (1..100 words added) and
``feedback_query_weight`` (0..1, the original query's share); ``semantic_cache`` (true or false, the
default: answer a query close enough to a cached one of the same options from the cache,
``retrieval.semantic_cache``; a search of several KBs uses it only when all of them turn it on);
``score_threshold`` (0..1, the KB's only: the ``relevance`` under which Dify's retrieval drops a hit when
Dify sends no threshold, as recommended by an evaluation run, ``retrieval.evaluation.kb_runs``).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError

RETRIEVERS = ("vector", "bm25", "graph")
MAX_WEIGHT = 100
MAX_CANDIDATES = 200
MAX_RRF_K = 1000
MAX_FEEDBACK_DOCS = 50
MAX_FEEDBACK_TERMS = 100
FUSIONS = ("rrf", "relevance", "minmax")
LEG_WEIGHTS = ("evidence", "fixed")
LEG_CANDIDATES = ("union", "own")
AGGREGATES = ("none", "max", "sum")
GROUP_BY = ("chunk", "document")

# key -> (type, minimum, maximum) of the numeric keys
_Bounds = tuple[type[int] | type[float], float, float]
_NUMBERS: dict[str, _Bounds] = {
    "rrf_k": (int, 1, MAX_RRF_K),
    "candidates": (int, 1, MAX_CANDIDATES),
    "dense_weight_floor": (float, 0, MAX_WEIGHT),
    "feedback_docs": (int, 0, MAX_FEEDBACK_DOCS),
    "feedback_terms": (int, 1, MAX_FEEDBACK_TERMS),
    "feedback_query_weight": (float, 0, 1),
    "score_threshold": (float, 0, 1),
}
_CHOICES = {
    "fusion": FUSIONS,
    "leg_weights": LEG_WEIGHTS,
    "leg_candidates": LEG_CANDIDATES,
    "aggregate": AGGREGATES,
    "group_by": GROUP_BY,
}
_SWITCHES = ("semantic_cache",)
KEYS = ("weights", *_NUMBERS, *_CHOICES, *_SWITCHES)


def clean_search_settings(value: object) -> dict[str, Any]:
    """The settings as stored (numbers typed, keys in a fixed order); ``ValidationError`` naming each
    bad key otherwise."""
    if value in (None, ""):
        return {}
    if not isinstance(value, dict):
        raise ValidationError('search settings must be a JSON object, e.g. {"weights": {"vector": 0.5}}')
    errors = [f"unknown key {key!r}; use {', '.join(KEYS)}" for key in value if key not in KEYS]
    cleaned: dict[str, Any] = {}
    for key in KEYS:
        if key not in value:
            continue
        if key == "weights":
            cleaned[key], problems = _clean_weights(value[key])
        elif key in _NUMBERS:
            cleaned[key], problems = _clean_number(key, value[key])
        elif key in _SWITCHES:
            problems = [] if isinstance(value[key], bool) else [f"{key} must be true or false"]
            cleaned[key] = value[key]
        else:
            choices = _CHOICES[key]
            problems = [] if value[key] in choices else [f"{key} must be one of {', '.join(choices)}"]
            cleaned[key] = value[key]
        errors += problems
    if errors:
        raise ValidationError(errors)
    return cleaned


def merged_search_settings(*layers: dict[str, Any]) -> dict[str, Any]:
    """Later layers win, key by key (weights retriever by retriever)."""
    merged: dict[str, Any] = {}
    for layer in layers:
        for key, value in (layer or {}).items():
            merged[key] = {**merged.get(key, {}), **value} if key == "weights" else value
    return merged


def _clean_weights(weights: object) -> tuple[dict[str, float | int | None], list[str]]:
    if not isinstance(weights, dict):
        return {}, ['weights must be an object such as {"vector": 0.5, "bm25": 1}']
    cleaned: dict[str, float | int | None] = {}
    errors: list[str] = []
    for name, weight in weights.items():
        if name not in RETRIEVERS:
            errors.append(f"unknown retriever {name!r} in weights; use {', '.join(RETRIEVERS)}")
            continue
        cleaned[name], problems = _clean_number(f"weights.{name}", weight, (float, 0, MAX_WEIGHT))
        errors += problems
    return cleaned, errors


def _clean_number(name: str, value: object, bounds: _Bounds | None = None) -> tuple[float | int | None, list[str]]:
    kind, low, high = bounds or _NUMBERS[name]
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if (
        not numeric
        or not isinstance(value, (int, float))  # (numeric says it; this narrows it for the type checker)
        or (kind is int and value != int(value))
        or not low <= value <= high
    ):
        noun = "an integer" if kind is int else "a number"
        return None, [f"{name} must be {noun} from {low} to {high}"]
    return kind(value), []
