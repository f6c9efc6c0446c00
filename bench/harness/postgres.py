"""PostgreSQL's own view of a vector search: where a filtered search's time goes and what the server holds.

* ``explained``: the plan of each statement one engine search runs (bench.vector_search's too);
* ``rows_touched``: ``EXPLAIN (ANALYZE, BUFFERS)`` of the statements one engine search runs (one query);
* ``statement_times``: per query, the nearest-rows statement's planning and execution time in
  PostgreSQL (``EXPLAIN (ANALYZE, TIMING OFF)``, so no per-node clock) next to the whole
  ``PgVectorIndex.search`` call without its row count: the difference is the round trip, the driver and
  the engine's Python;
* ``plan_shape``: the node chain of a plan, ``PeakMemory``: the server's memory while an index builds.

Medians per part: they need not add up to the median of the whole.
"""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path


def _statements(engine, scope, spec, vector, depth, plan=None) -> list[tuple[str | None, str]]:
    """The statements one ``engine.search`` ran, as (its planner settings or None, the statement)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        engine.search(scope, vector, depth, spec.sql, plan=plan)
    out = []
    for query in ctx.captured_queries:
        if "<=>" not in query["sql"] and "count(" not in query["sql"]:
            continue  # the index's row count, read once a minute
        parts = query["sql"].split("; ")
        settings = parts[0] if parts[0].startswith("SELECT set_config") else None
        out.append((settings, next(p for p in parts if not p.startswith("SELECT set_config"))))
    return out


def _explain(settings: str | None, statement: str, options: str) -> dict:
    """The top of an ``EXPLAIN (<options>, FORMAT JSON)``, run under the engine's planner settings."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        if settings:
            cursor.execute(settings)
        cursor.execute(f"EXPLAIN ({options}, FORMAT JSON) " + statement)
        return cursor.fetchone()[0][0]


def explained(engine, scope, spec, vector, depth, options: str = "ANALYZE") -> list[tuple[str, dict]]:
    """("count" or "nearest", its plan) for each statement one engine search runs, explained with
    ``options`` under the planner settings the engine sends with it."""
    return [
        ("count" if "count(" in statement else "nearest", _explain(settings, statement, options)["Plan"])
        for settings, statement in _statements(engine, scope, spec, vector, depth)
    ]


def rows_touched(engine, scope, spec, vector, depth) -> dict:
    """EXPLAIN (ANALYZE, BUFFERS) of each statement one engine search runs, under the planner settings
    it sends with them: buffers hit + read, rows the scans returned and rows their filters removed."""
    out = []
    for statement, plan in explained(engine, scope, spec, vector, depth, "ANALYZE, BUFFERS"):
        nodes, scanned, removed = [plan], 0, 0
        while nodes:
            node = nodes.pop()
            nodes += node.get("Plans", [])
            if "Scan" in node["Node Type"] and node["Node Type"] != "Bitmap Index Scan":  # its heap scan counts
                scanned += node.get("Actual Rows", 0)
                removed += node.get("Rows Removed by Filter", 0) + node.get("Rows Removed by Index Recheck", 0)
        out.append(
            {
                "statement": statement,
                "plan": plan_shape([{"Plan": plan}]),
                "buffers": plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0),
                "rows_scanned": round(scanned),
                "rows_removed": round(removed),
            }
        )
    return {"statements": out, "buffers": sum(s["buffers"] for s in out)}


def statement_times(engine, scope, spec, vectors, depth, matching: int) -> dict:
    """Per query vector: ``engine.search`` told the matching rows (no count, as the service calls it),
    then its nearest-rows statement explained with ANALYZE. Medians in ms: the call, PostgreSQL's
    planning and execution, and what is left (round trip, psycopg, the engine's Python)."""
    calls, planning, execution = [], [], []
    for vector in vectors:
        started = time.perf_counter()
        engine.search(scope, vector, depth, spec.sql, plan=matching)
        calls.append((time.perf_counter() - started) * 1000)
        for settings, statement in _statements(engine, scope, spec, vector, depth, plan=matching):
            top = _explain(settings, statement, "ANALYZE, TIMING OFF")
            planning.append(top["Planning Time"])
            execution.append(top["Execution Time"])
    call, plan_ms, run_ms = (statistics.median(xs) for xs in (calls, planning, execution))
    return {
        "call_ms": round(call, 2),
        "planning_ms": round(plan_ms, 2),
        "execution_ms": round(run_ms, 2),
        "outside_sql_ms": round(max(0.0, call - plan_ms - run_ms), 2),
    }


def plan_shape(explain: list) -> str:
    """The node chain of an ``EXPLAIN (FORMAT JSON)`` plan, first child first (index names included)."""
    node, shape = explain[0]["Plan"], []
    while node:
        shape.append(node["Node Type"] + (f" ({node['Index Name']})" if "Index Name" in node else ""))
        node = (node.get("Plans") or [None])[0]
    return " > ".join(shape)


class PeakMemory:
    """Samples the PostgreSQL server's processes (the children of its postmaster) while a build runs."""

    def __init__(self, postmaster_pid: int):
        self.postmaster_pid = postmaster_pid
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_bytes = max(self.peak_bytes, self.sample())
            self._stop.wait(0.2)

    def sample(self) -> int:
        private, shared = 0, 0
        for pid in self._server_pids():
            try:
                fields = dict(
                    line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
                )
            except OSError:
                continue
            private += int(fields.get("RssAnon", "0 kB").split()[0]) * 1024
            shared = max(shared, int(fields.get("RssShmem", "0 kB").split()[0]) * 1024)
        return private + shared

    def _server_pids(self) -> list[int]:
        pids = [self.postmaster_pid]
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == self.postmaster_pid:
                    pids.append(int(stat.parent.name))
            except (OSError, ValueError, IndexError):
                continue
        return pids
