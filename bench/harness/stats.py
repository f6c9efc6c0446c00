"""Timing statistics: percentiles, the summary every benchmark reports, searches timed one way or
several ways in turn (so a burst of other people's load hits each alike), and recall against an exact
top k."""

from __future__ import annotations

import statistics
import time


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarize_ms(seconds: list[float]) -> dict:
    ms = [s * 1000 for s in seconds]
    return {
        "n": len(ms),
        "p50_ms": round(percentile(ms, 50), 2),
        "p95_ms": round(percentile(ms, 95), 2),
        "mean_ms": round(statistics.fmean(ms), 2) if ms else None,
        "max_ms": round(max(ms), 2) if ms else None,
    }


def timed(fn, items, warmup: int = 3) -> tuple[dict, list]:
    """p50/p95 of ``fn(item)`` over items (the first ``warmup`` untimed) and each item's result."""
    for item in items[:warmup]:
        fn(item)
    seconds, results = [], []
    for item in items:
        started = time.perf_counter()
        results.append(fn(item))
        seconds.append(time.perf_counter() - started)
    return summarize_ms(seconds), results


def timed_in_turn(calls: dict, items, warmup: int = 3) -> dict:
    """p50/p95 of each of ``calls`` over items, the calls in turn per item (the first ``warmup`` untimed)."""
    seconds: dict = {name: [] for name in calls}
    for i, item in enumerate(items):
        for name, fn in calls.items():
            started = time.perf_counter()
            fn(item)
            if i >= warmup:
                seconds[name].append(time.perf_counter() - started)
    return {name: summarize_ms(s) for name, s in seconds.items()}


def recall(found: list[list[int]], truth: list, k: int) -> float | None:
    """Mean share of the exact top k found (of all matching rows, when fewer match); None if none match."""
    shares = [len(set(f[:k]) & set(t.tolist())) / len(t) for f, t in zip(found, truth) if len(t)]
    return round(statistics.fmean(shares), 4) if shares else None
