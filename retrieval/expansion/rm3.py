"""RM3 pseudo-relevance feedback for the BM25 leg: the query, re-weighted and widened by the words of
the passages its first pass ranked highest.

The first pass's top ``docs`` passages are taken as relevant. Each word's weight in that relevance model
is ``Σ_D P(w|D) · P(D|Q)``: its frequency in a passage over the passage's length, times the passage's
share of the feedback passages' BM25 scores. The ``terms`` heaviest words, their weights summed to 1, are
mixed with the original query (its tokens' frequencies over the query's length) as
``query_weight · P(w|Q) + (1 - query_weight) · P(w|R)`` (Lavrenko & Croft's relevance model, interpolated
as in RM3). Everything is on the analyzer's tokens, so stopwords are already gone and Chinese works alike.
Feedback helps when the first pass is mostly right (a vocabulary mismatch the top passages bridge) and
drifts when it is not: it is an option, off by default (docs/benchmarks/decisions.md, "RM3 pseudo-relevance
feedback").
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass


@dataclass(frozen=True)
class Feedback:
    docs: int  # feedback passages from the first pass; 0: no feedback
    terms: int  # words of the relevance model kept
    query_weight: float  # the original query's share of the final weights, 0..1

    @property
    def enabled(self) -> bool:
        return self.docs > 0 and self.terms > 0 and self.query_weight < 1.0


@dataclass(frozen=True)
class WeightedQuery:
    tokens: list[str]
    weights: list[float]  # one per token, summing to 1


def relevance_model(passages: list[tuple[list[str], float]], terms: int) -> dict[str, float]:
    """The ``terms`` heaviest words of the passages (tokens, first-pass score), weights summing to 1."""
    total_score = sum(max(score, 0.0) for _, score in passages)
    weights: defaultdict[str, float] = defaultdict(float)
    for tokens, score in passages:
        if not tokens or total_score <= 0:
            continue
        share = max(score, 0.0) / total_score
        for token, count in Counter(tokens).items():
            weights[token] += count / len(tokens) * share
    top = sorted(weights.items(), key=lambda item: (-item[1], item[0]))[:terms]
    mass = sum(weight for _, weight in top)
    return {token: weight / mass for token, weight in top} if mass > 0 else {}


def feedback_query(
    query_tokens: list[str], passages: list[tuple[list[str], float]], feedback: Feedback
) -> WeightedQuery:
    """The RM3 query: each distinct token of the query and of the relevance model once, with its weight."""
    original = {token: count / len(query_tokens) for token, count in Counter(query_tokens).items()}
    model = relevance_model(passages, feedback.terms)
    if not model:
        return WeightedQuery(list(original), list(original.values()))
    alpha = feedback.query_weight
    mixed = {
        token: alpha * original.get(token, 0.0) + (1 - alpha) * model.get(token, 0.0) for token in {**original, **model}
    }
    ordered = sorted(mixed.items(), key=lambda item: (-item[1], item[0]))
    return WeightedQuery([token for token, _ in ordered], [weight for _, weight in ordered])
