"""The HTTP driver: the service's search endpoints called by one client, every scenario in turn for each
query (the order rotating from query to query, so a burst of other people's load hits each alike), with
what each answer says of itself (its server-side stages, cache flag, a short result list)."""

from __future__ import annotations

import logging
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field

from bench.harness.stats import percentile, summarize_ms


@dataclass(frozen=True)
class Scenario:
    """One request shape: ``name`` in the result, the URL path, and the body's fields besides the query
    and top_k (filters, ``rerank``)."""

    name: str
    path: str
    body: dict = field(default_factory=dict)


class StageProfile:
    """The HTTP responses of each scenario, summed up as medians per stage of the critical path and the
    client's time outside the pipeline's total (the HTTP server, middleware, key check, rate limit,
    serializers and JSON both ways)."""

    OUTSIDE = "outside the pipeline"

    def __init__(self) -> None:
        self._parts: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))

    def add(self, scenario: str, elapsed_s: float, body: dict) -> None:
        if "critical_path_ms" not in body:
            return
        parts = self._parts[scenario]
        parts[self.OUTSIDE].append(max(0.0, elapsed_s * 1000 - body["timings_ms"]["total"]))
        for stage, ms in body["critical_path_ms"].items():
            parts[stage].append(ms)

    def summary(self) -> dict:
        return {
            scenario: {stage: round(statistics.median(ms), 2) for stage, ms in parts.items()}
            for scenario, parts in self._parts.items()
        }


def http_run(
    base_url: str,
    key: str,
    scenarios: list[Scenario],
    queries: list[str],
    *,
    warmup: int,
    top_k: int = 10,
    budget_s: float | None = None,
) -> dict:
    """Each query to every scenario in turn; the first ``warmup`` queries untimed, and no query started
    once ``budget_s`` of timed requests passed. A non-200 answer stops the run. Per scenario: latency
    (``summarize_ms``), the latency the server reports of itself (``server_view``), answers with fewer than ``top_k`` results, cached answers, the server's p50 per
    pipeline stage; ``stages``: the critical path's medians (:class:`StageProfile`)."""
    import httpx

    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    times: dict = {s.name: [] for s in scenarios}
    server_s: dict = {name: [] for name in times}
    short = dict.fromkeys(times, 0)
    cached = dict.fromkeys(times, 0)
    stages: dict = {name: defaultdict(list) for name in times}
    profile = StageProfile()
    budget_hit = False
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=120) as client:
        started = None
        for i, query in enumerate(queries):
            if i == warmup:
                started = time.perf_counter()
            if started is not None and budget_s is not None and time.perf_counter() - started > budget_s:
                budget_hit = True
                break
            for scenario in scenarios[i % len(scenarios) :] + scenarios[: i % len(scenarios)]:
                t0 = time.perf_counter()
                response = client.post(scenario.path, json={"query": query, "top_k": top_k, **scenario.body})
                elapsed = time.perf_counter() - t0
                if response.status_code != 200:
                    raise RuntimeError(f"{scenario.name}: HTTP {response.status_code}: {response.text[:300]}")
                if i < warmup:
                    continue
                payload = response.json()
                times[scenario.name].append(elapsed)
                if "latency_ms" in payload:
                    server_s[scenario.name].append(payload["latency_ms"] / 1000)
                short[scenario.name] += len(payload.get("results", [])) < top_k
                cached[scenario.name] += bool(payload.get("cached"))
                for stage, ms in (payload.get("timings_ms") or {}).items():
                    stages[scenario.name][stage].append(ms)
                profile.add(scenario.name, elapsed, payload)
    return {
        "scenarios": {
            name: {
                **summarize_ms(times[name]),
                "server_view": summarize_ms(server_s[name]),
                "short": short[name],
                "cached": cached[name],
                "server_stage_p50_ms": {s: round(percentile(v, 50), 2) for s, v in sorted(stages[name].items())},
            }
            for name in times
        },
        "stages": profile.summary(),
        "budget_hit": budget_hit,
    }
