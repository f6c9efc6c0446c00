"""The markdown tables of one ``bench.filtered_scale`` run (its JSON in, the text for docs/BENCHMARKS.md out).

.venv/bin/python -m bench.filtered_scale.report bench/results/filtered_scale-<rows>-<data>-<date>.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.filtered_scale import peers
from bench.filtered_scale.peers import MODES
from bench.harness.tables import markdown_table


def _ms(stats: dict | None) -> str:
    if not stats:
        return "-"
    digits = 2 if stats["p50_ms"] < 1 else 1  # the peers' sub-millisecond searches
    return f"{stats['p50_ms']:,.{digits}f} ({stats['p95_ms']:,.{digits}f})"


def _r(recall: float | None) -> str:
    return "-" if recall is None else f"{recall:.3f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}x"


def render_markdown(result: dict) -> str:
    filters, modes = [f.name for f in peers.FILTERS], MODES
    machine = result["machine"]
    load = result.get("loadavg_at_start", []), result.get("loadavg_at_end", [])
    lines = [
        (
            f"Run {result['started']} to {result.get('finished', '?')}, commit `{result.get('commit')}`, "
            f"{machine['nproc']} CPU {machine['cpu_model']}, {machine['mem_total_gb']} GB; "
            f"**load (1, 5, 15 min) {load[0]} at the start, {load[1]} at the end**."
        ),
        (
            f"Data: {result['data']['rows']:,} {result['data']['kind']} rows ({result['data']['model']}); vector column "
            f"storage `{result.get('storage')}`; table {result.get('table')} MB; service index {result.get('service_index')}."
        ),
        "",
        "```sh",
        result["command"],
        "```",
        "",
    ]
    default = result["variants"]["defaults"]
    http = (result.get("http") or {}).get("scenarios", {})
    inproc = result.get("in_process", {})
    rows = []
    for name in filters:
        touched = result["rows_touched"][name]
        steps = ", ".join(
            f"{s['statement']} {s['rows_scanned']:,}+{s['rows_removed']:,}" for s in touched["statements"]
        )
        row = [
            name,
            f"{result['matching_rows'][name]:,}",
            _ms(default[name]),
            default[name]["recall_at_10"],
            f"{touched['buffers']:,}",
            steps,
        ]
        row += [_ms(inproc.get(f"{mode} | {name}")) for mode in modes]
        row += [_ms(http.get(f"{mode} | {name}")) for mode in modes]
        row += [
            _ratio((http.get(f"{mode} | {name}") or {}).get("p50_ms"), (http.get(f"{mode} | none") or {}).get("p50_ms"))
            for mode in modes
        ]
        rows.append(row)
    headers = ["filter", "rows", "engine p50 (p95) ms", "recall@10", "buffers", "rows scanned+removed"]
    headers += (
        [f"in process {m}" for m in modes] + [f"HTTP {m}" for m in modes] + [f"HTTP {m} / unfiltered" for m in modes]
    )
    lines += markdown_table(headers, rows) + [""]

    for key, peer in result.get("peers", {}).items():
        if "skipped" in peer:
            lines += [f"{key}: skipped, {peer['skipped']}.", ""]
            continue
        lines += [f"**{peer['engine']}** (build {peer['build']}); the service's engine as a ratio to it:", ""]
        rows = [
            [
                name,
                _ms(default[name]),
                _r(default[name]["recall_at_10"]),
                _ms(peer[name]),
                _r(peer[name]["recall_at_10"]),
                _ratio(default[name]["p50_ms"], peer[name]["p50_ms"]),
                _ratio((http.get(f"vector | {name}") or {}).get("p50_ms"), peer[name]["p50_ms"]),
                _ratio(default[name]["recall_at_10"], peer[name]["recall_at_10"]),
            ]
            for name in filters
        ]
        headers = [
            "filter",
            "service engine",
            "recall",
            "peer",
            "recall",
            "p50 ratio",
            "HTTP vector p50 ratio",
            "recall ratio",
        ]
        lines += markdown_table(headers, rows) + [""]

    lines += _time_lines(result, filters)
    if len(result["variants"]) > 1 or result.get("builds"):
        index = result.get("service_index") or {}
        built = f" ({_built(index)})" if index and result.get("builds") else ""
        rows = [
            [
                f"`{name}`{built if name == 'defaults' else ''}",
                *(f"{v[f]['p50_ms']:,.1f} ms, {_r(v[f]['recall_at_10'])}" for f in filters),
            ]
            for name, v in result["variants"].items()
        ]
        rows += [
            [
                f"`{name}` ({_built(b)})",
                *(f"{b['search'][f]['p50_ms']:,.1f} ms, {_r(b['search'][f]['recall_at_10'])}" for f in filters),
            ]
            for name, b in result.get("builds", {}).items()
        ]
        rows += [
            [f"`{name}`, `{variant}`", *(f"{v[f]['p50_ms']:,.1f} ms, {_r(v[f]['recall_at_10'])}" for f in filters)]
            for name, b in result.get("builds", {}).items()
            for variant, v in b.get("variants", {}).items()
        ]
        lines += ["Levers, engine p50 and recall@10:", "", *markdown_table(["variant", *filters], rows), ""]
    lines += _build_http_lines(result, filters)
    lines += _acl_lines(result)
    memory = {
        k: v
        for k, v in (
            ("PostgreSQL RSS MB", result.get("postgres_rss_mb")),
            ("gunicorn RSS MB", (result.get("http") or {}).get("gunicorn_rss_mb")),
        )
        if v
    }
    if memory:
        lines += ["Memory: " + ", ".join(f"{k} {v:,}" for k, v in memory.items()) + "."]
    if result.get("growth"):
        lines += ["", *_growth_lines(result["growth"], modes)]
    return "\n".join(lines) + "\n"


def _built(index: dict) -> str:
    """An index's build as the levers table names it: what it was built and searched with, its cost."""
    return (
        f"m {index.get('m')} / ef_construction {index.get('ef_construction')}, ef_search "
        f"{index.get('ef_search_at_depth_100')} at depth 100; build {index['build_s']} s, {index['index_mb']} MB"
    )


def _time_lines(result: dict, filters: list[str]) -> list[str]:
    """Where a vector search's time goes: over HTTP the critical path's stages and the time outside the
    pipeline, in PostgreSQL the nearest-rows statement, next to each peer's whole search (medians, ms)."""
    stages = (result.get("http") or {}).get("stages") or {}
    sql = result.get("statement_times") or {}
    if not stages or not sql:
        return []
    http = result["http"]["scenarios"]
    order: list[str] = []  # a stage only some filters run (the count) joins the columns where it first shows
    for name in filters:
        order += [stage for stage in stages[f"vector | {name}"] if stage not in order]
    peer_names = [key for key, peer in result.get("peers", {}).items() if "skipped" not in peer]
    rows = []
    for name in filters:
        parts, timing = stages[f"vector | {name}"], sql.get(name)
        rows.append(
            [
                name,
                f"{http[f'vector | {name}']['p50_ms']:.1f}",
                *(f"{parts[stage]:.1f}" if stage in parts else "-" for stage in order),
                *(
                    (
                        f"{timing['call_ms']:.1f}",
                        f"{timing['planning_ms']:.2f}",
                        f"{timing['execution_ms']:.1f}",
                        f"{timing['outside_sql_ms']:.1f}",
                    )
                    if timing
                    else ("-",) * 4  # a filter no row matches runs no statement
                ),
                *(f"{result['peers'][peer][name]['p50_ms']:.2f}" for peer in peer_names),
            ]
        )
    headers = [
        "filter",
        "HTTP vector p50",
        *order,
        "engine call",
        "SQL planning",
        "SQL execution",
        "engine outside SQL",
    ]
    headers += [f"{result['peers'][peer]['engine']} p50" for peer in peer_names]
    return [
        "Where a vector search's time goes (medians, ms; HTTP: the critical path's stages and the time outside",
        "the pipeline; engine: the nearest-rows statement, no count):",
        "",
        *markdown_table(headers, rows),
        "",
    ]


def _build_http_lines(result: dict, filters: list[str]) -> list[str]:
    """``--build-http``: each build's p50 over HTTP beside the service index's (the ``defaults``)."""
    builds = {name: b["http"]["scenarios"] for name, b in result.get("builds", {}).items() if b.get("http")}
    http = (result.get("http") or {}).get("scenarios", {})
    if not builds or not http:
        return []
    rows = []
    for mode in ("vector", "hybrid"):
        for name in filters:
            scenario = f"{mode} | {name}"
            after = http.get(scenario)
            cells = [builds[build].get(scenario) for build in builds]
            rows.append(
                [
                    f"{mode}, {name}",
                    _ms(after),
                    *(f"{_ms(cell)}, {_ratio(cell and cell['p50_ms'], after and after['p50_ms'])}" for cell in cells),
                ]
            )
    headers = ["HTTP p50 (p95) ms", "defaults", *(f"`{build}`, ratio to defaults" for build in builds)]
    return ["Each build served over HTTP while it was the live index:", "", *markdown_table(headers, rows), ""]


def _acl_lines(result: dict) -> list[str]:
    """``--acl``: per reader the rows it may read, the engine's p50 and recall@10 against the exact
    ACL-filtered top 10, and p50 over HTTP, each as a ratio to the unfiltered p50."""
    run = result.get("acl")
    if not run:
        return []
    unfiltered = (result.get("http") or {}).get("scenarios", {})
    rows = []
    graphs = run.get("reader_graphs") or {}
    for part, suffix in ((run, ""), (graphs, ", its own graph")):
        if not part:
            continue
        engine, http = part["engine"], (part.get("http") or {}).get("scenarios", {})
        for name, admitted in run["matching_rows"].items():
            if suffix and not http.get(f"vector | {name}"):
                continue  # a reader without a graph: as above
            row = [
                name + suffix,
                f"{admitted:,}",
                _ms(engine[name]),
                _r(engine[name]["recall_at_10"]),
                _ratio(engine[name]["p50_ms"], engine["none"]["p50_ms"]),
            ]
            for mode in ("vector", "hybrid"):
                cell, base = http.get(f"{mode} | {name}"), unfiltered.get(f"{mode} | none")
                row += [_ms(cell), _ratio(cell and cell["p50_ms"], base and base["p50_ms"])]
            rows.append(row)
    engine = run["engine"]
    headers = ["reader", "rows", "engine p50 (p95) ms", "recall@10", "engine / unfiltered"]
    headers += ["HTTP vector", "/ unfiltered", "HTTP hybrid", "/ unfiltered"]
    index = run.get("service_index") or result.get("service_index_rebuilt") or {}
    return [
        (
            f"Permissions: document ACLs written in {run['update_s']} s ({run['documents']}), vacuum "
            f"{run['vacuum_s']} s, the service index rebuilt ({index.get('build_s')} s), keyword index "
            f"{run.get('lexical_rebuild_s', '-')} s. Engine unfiltered on that index: {_ms(engine['none'])} ms, "
            f"recall {_r(engine['none']['recall_at_10'])}; HTTP ratios are to this run's unfiltered p50 above, "
            "taken before the ACLs were written (goal: within 1.3x, recall@10 ≥ 0.95):"
        ),
        "",
        *markdown_table(headers, rows),
        "",
    ]


def _growth_lines(growth: dict, modes: tuple[str, ...]) -> list[str]:
    """``--growth``: the HTTP p50 at each size with the ratio to the smallest, and the two ingestion rates."""
    lines = []
    sizes = sorted(growth.get("http", {}), key=int)
    if sizes:
        rows = []
        for scenario in growth["http"][sizes[0]]["scenarios"]:
            if scenario.split(" | ")[0] not in modes:
                continue
            cells = [growth["http"][size]["scenarios"].get(scenario) for size in sizes]
            ratio = _ratio(cells[-1]["p50_ms"], cells[0]["p50_ms"]) if cells[-1] and cells[0] else "-"
            rows.append([scenario.replace(" | ", ", "), *(_ms(cell) for cell in cells), ratio])
        headers = ["HTTP p50 (p95) ms", *(f"{int(size):,} rows" for size in sizes), f"ratio to {int(sizes[0]):,}"]
        lines += ["Growth, the same run at each size (scenarios interleaved, result cache off):", ""]
        lines += markdown_table(headers, rows) + [""]
    ingest = growth.get("ingest", {})
    if "empty" in ingest and "full" in ingest:
        empty, full = ingest["empty"], ingest["full"]
        lines += [
            (
                f"Ingestion end to end of the same {empty['documents']:,} documents ({empty['chunks']:,} chunks): "
                f"into an empty KB {empty['chunks_per_s']} chunks/s ({empty['wall_s']} s, CPU {empty['cpu_s']} s), "
                f"into the {full['rows_before']:,}-row KB {full['chunks_per_s']} chunks/s ({full['wall_s']} s, "
                f"CPU {full['cpu_s']} s): empty / big rate **{_ratio(empty['chunks_per_s'], full['chunks_per_s'])}**."
            ),
            "",
        ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result", type=Path, help="a run's bench/results/filtered_scale-<rows>-<data>-<date>.json")
    print(render_markdown(json.loads(parser.parse_args().result.read_text())))


if __name__ == "__main__":
    main()
