"""``evaluate --choose-default``: how a default is chosen (issue 28). Every candidate runs on every shared
set; a candidate is *selected* on the even halves of their judged queries and *confirmed* on the odd
halves, so what chose it is not what proves it. The decision is a pure function of a score table, so
it can be checked by hand.

A candidate passes a half when, on that half:

- it gains nDCG@10 on the reference set (SciFact) over the current default;
- it loses no more than ``MAX_LOSS`` nDCG@10 against the default on any set;
- it scores at or above the better single leg (vector, bm25) on every set;
- it keeps the threshold share (the share of judged-relevant top-10 hits kept at the ``relevance``
  threshold that keeps 90 % of them on the reference set) at or above the default's on every other set.

Among the candidates that pass the even half, the one with the highest reference nDCG@10 there is
selected; it wins if it passes the odd half too. Otherwise the default stays.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from knowledge.search_settings import FUSIONS, LEG_CANDIDATES
from retrieval.evaluation.metrics import kept_share, threshold_keeping, zero_relevance
from retrieval.evaluation.runs import RunResult
from retrieval.evaluation.variants import DEPTH, Variant
from retrieval.tuning import DEFAULT_FUSION, DEFAULT_LEG_CANDIDATES

# Every fusion with each leg's own candidates or the union: "fusion/leg_candidates".
CANDIDATES = tuple(f"{fusion}/{pool}" for fusion in FUSIONS for pool in LEG_CANDIDATES)
CURRENT_DEFAULT = f"{DEFAULT_FUSION}/{DEFAULT_LEG_CANDIDATES}"
HALVES = ("even", "odd")
LEGS = ("vector", "bm25")
SHARED_SPLITS = ("train", "dev")  # never a test split: those are held out
MAX_LOSS = 0.005
REFERENCE_SET = "scifact"


def half_of(query_id: str) -> str:
    """A query's half: the parity of its id when the id is a number (SciFact's), else the parity of the
    first byte of its id's SHA-256, so the split depends on the id alone (not on which other ids a
    split holds, nor on their order) and is the same on every machine."""
    text = query_id.strip()
    parity = int(text) % 2 if text.isascii() and text.isdigit() else hashlib.sha256(query_id.encode()).digest()[0] % 2
    return HALVES[parity]


def halves(query_ids: Iterable[str]) -> dict[str, list[str]]:
    split: dict[str, list[str]] = {half: [] for half in HALVES}
    for query_id in query_ids:
        split[half_of(query_id)].append(query_id)
    return split


@dataclass(frozen=True)
class SetScores:
    """One set's half means: nDCG@10 per run (each candidate, and the legs ``vector`` and ``bm25``) and
    the threshold share per candidate, each as ``{half: value}``."""

    ndcg: dict[str, dict[str, float]]
    threshold_share: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    candidate: str
    failures: dict[str, list[str]]  # half -> the rules it broke there (empty: it passes that half)

    def passes(self, half: str) -> bool:
        return not self.failures[half]


@dataclass(frozen=True)
class Decision:
    default: str  # the current default
    winner: str  # the new default: the confirmed candidate, else the current one
    selected: str | None  # the best candidate on the even halves, None if none passed them
    verdicts: list[Verdict]


def judge(candidate: str, default: str, sets: dict[str, SetScores], half: str, reference: str) -> list[str]:
    """The rules ``candidate`` breaks on one half, in words (empty: it passes)."""
    broken = []
    ref = sets[reference].ndcg
    if ref[candidate][half] <= ref[default][half]:
        broken.append(f"no gain on {reference}")
    for name, scores in sets.items():
        if scores.ndcg[candidate][half] < scores.ndcg[default][half] - MAX_LOSS:
            broken.append(f"loses more than {MAX_LOSS} on {name}")
        best_leg = max(scores.ndcg[leg][half] for leg in LEGS if leg in scores.ndcg)
        if scores.ndcg[candidate][half] < best_leg:
            broken.append(f"below its best leg on {name}")
        shares = scores.threshold_share
        if name != reference and candidate in shares and shares[candidate][half] < shares[default][half]:
            broken.append(f"threshold share below the default's on {name}")
    return broken


def choose(candidates: Sequence[str], default: str, sets: dict[str, SetScores], reference: str) -> Decision:
    """Select on the even halves, confirm on the odd ones (the module's docstring)."""
    if reference not in sets:
        raise ValueError(f"the reference set {reference!r} was not measured")
    verdicts = [
        Verdict(candidate, {half: judge(candidate, default, sets, half, reference) for half in HALVES})
        for candidate in candidates
        if candidate != default
    ]
    passing = [verdict for verdict in verdicts if verdict.passes("even")]
    selected = max(passing, key=lambda verdict: sets[reference].ndcg[verdict.candidate]["even"], default=None)
    winner = selected.candidate if selected is not None and selected.passes("odd") else default
    return Decision(default, winner, None if selected is None else selected.candidate, verdicts)


# --- the score table, from the runs -------------------------------------------------------------------


def variant_of(candidate: str) -> Variant:
    """The hybrid run of a candidate, its settings given explicitly (the label stays when defaults move)."""
    fusion, pool = candidate.split("/")
    return Variant("hybrid", DEPTH, fusion=fusion, leg_candidates=pool)


def leg_variants() -> dict[str, Variant]:
    return {leg: Variant(leg, DEPTH) for leg in LEGS}


def _mean_ndcg(result: RunResult, query_ids: Sequence[str]) -> float:
    scores = [result.per_query[qid]["ndcg@10"] for qid in query_ids if qid in result.per_query]
    return float(np.mean(scores)) if scores else 0.0


def _relevant(result: RunResult, query_ids: Sequence[str]) -> list[float]:
    return [score for score, judged in result.judged(query_ids) if judged]


def reference_thresholds(runs: Mapping[str, RunResult], split: dict[str, list[str]]) -> dict[str, dict[str, float]]:
    """Per candidate and half of the reference set: the ``relevance`` threshold keeping 90 % of its
    judged-relevant top-10 hits (0.0 without any)."""
    return {
        name: {half: threshold_keeping(_relevant(result, ids)) or 0.0 for half, ids in split.items()}
        for name, result in runs.items()
        if name not in LEGS
    }


def set_scores(
    runs: Mapping[str, RunResult], split: dict[str, list[str]], thresholds: dict[str, dict[str, float]]
) -> SetScores:
    """One set's table: each run's nDCG@10 per half, and the share of each candidate's relevant hits
    that the reference set's threshold (for the same candidate and half) keeps here."""
    ndcg = {name: {half: _mean_ndcg(result, ids) for half, ids in split.items()} for name, result in runs.items()}
    shares = {
        name: {half: kept_share(_relevant(result, ids), thresholds[name][half]) or 0.0 for half, ids in split.items()}
        for name, result in runs.items()
        if name in thresholds
    }
    return SetScores(ndcg, shares)


def whole_splits(
    runs: Mapping[str, Mapping[str, RunResult]], query_halves: Mapping[str, dict[str, list[str]]], reference: str
) -> dict[str, dict[str, dict[str, Any]]]:
    """Per set and run, over the whole split: nDCG@10, the threshold share (candidates; the reference
    set's threshold for the whole split) and the hits at relevance 0 (issue 28, item 2's figures)."""
    every = {name: {"all": [qid for ids in split.values() for qid in ids]} for name, split in query_halves.items()}
    thresholds = reference_thresholds(runs[reference], every[reference])
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for name, results in runs.items():
        scores = set_scores(results, every[name], thresholds)
        table[name] = {
            run: {
                "ndcg@10": round(scores.ndcg[run]["all"], 4),
                "threshold_share": round(scores.threshold_share[run]["all"], 4) if run in thresholds else None,
                "threshold": round(thresholds[run]["all"], 4) if run in thresholds else None,
                "at_zero": zero_relevance(result.judged()),
            }
            for run, result in results.items()
        }
    return table


def decision_report(
    sets: Mapping[str, SetScores],
    query_halves: Mapping[str, dict[str, list[str]]],
    thresholds: dict[str, dict[str, float]],
    decision: Decision,
    *,
    commit: str | None,
) -> dict[str, Any]:
    """The protocol's run as JSON: the table it decided on and the decision."""
    return {
        "created_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit,
        "queries": {name: {half: len(ids) for half, ids in split.items()} for name, split in query_halves.items()},
        "ndcg@10": {name: scores.ndcg for name, scores in sets.items()},
        "threshold_share": {name: scores.threshold_share for name, scores in sets.items()},
        "reference_thresholds": thresholds,
        "default": decision.default,
        "selected": decision.selected,
        "winner": decision.winner,
        "failures": {verdict.candidate: verdict.failures for verdict in decision.verdicts},
    }
