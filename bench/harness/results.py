"""A run's result file, ``bench/results/<name>-<date>.json``: what the benchmark measured, with the run's
date, the code's commit, the load average at its start and end, the command line and the machine, so a
figure in the docs can name the file it came from."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

from bench.harness.project import REPO_ROOT

RESULTS_DIR = REPO_ROOT / "bench" / "results"

# The file each result name writes in this process: a benchmark that writes its result as it goes rewrites
# its own file, and a second run the same day writes <name>-<date>-2.json instead of over the first.
_RUN_PATHS: dict[str, Path] = {}
_STARTED = {"date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "loadavg": os.getloadavg()}


def run_info() -> dict:
    """Date, commit (``+dirty`` with local changes), load averages at the start and now, command."""
    commit = _git("rev-parse", "--short", "HEAD")
    if commit and _git("status", "--porcelain", "--untracked-files=no"):
        commit += "+dirty"
    argv = sys.orig_argv[1:] if hasattr(sys, "orig_argv") else sys.argv
    return {
        "date_utc": _STARTED["date_utc"],
        "commit": commit or None,
        "loadavg_at_start": [round(x, 2) for x in _STARTED["loadavg"]],
        "loadavg_at_write": [round(x, 2) for x in os.getloadavg()],
        "command": ".venv/bin/python " + shlex.join(argv),
    }


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def machine_info() -> dict:
    cpu_model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
                break
    except OSError:
        pass
    info = {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_model": cpu_model,
        "mem_total_gb": mem_gb,
        "python": platform.python_version(),
        "date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "env": {
            name: os.environ[name]
            for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "TORCH_THREADS", "DATABASE_URL")
            if name in os.environ
        },
    }
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
    except Exception:  # informational only
        pass
    return info


def add_wait_quiet(parser) -> None:
    """``--wait-quiet SECONDS``: a benchmark's option to start only once the machine is quiet."""
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0,
        metavar="SECONDS",
        help="first wait up to SECONDS for the 1-minute load average to drop below 1.5",
    )


def wait_for_quiet(max_wait_s: float, threshold: float = 1.5) -> float:
    """Wait (up to max_wait_s) until the 1-minute load average drops below threshold; returns the load.
    Other people's jobs on a shared 2-core machine swing the numbers by 2x or more."""
    deadline = time.monotonic() + max_wait_s
    load = os.getloadavg()[0]
    if max_wait_s > 0 and load >= threshold:
        print(f"waiting up to {max_wait_s:.0f} s for load average < {threshold} (now {load:.2f})", flush=True)
    while max_wait_s > 0 and load >= threshold and time.monotonic() < deadline:
        time.sleep(5)
        load = os.getloadavg()[0]
    return load


def code_fingerprint(paths: list[str], root: Path = REPO_ROOT) -> dict:
    """Short SHA-256 of the production files a benchmark exercises (the code changes while we measure);
    a directory counts as all its Python files (the search pipeline is ``retrieval/services``)."""
    out = {}
    for rel in paths:
        path = root / rel
        try:
            if path.is_dir():
                content = b"".join(file.name.encode() + file.read_bytes() for file in sorted(path.glob("*.py")))
            else:
                content = path.read_bytes()
            out[rel] = hashlib.sha256(content).hexdigest()[:12]
        except OSError:
            out[rel] = None
    return out


def unique_name(prefix: str) -> str:
    return f"{prefix}-{dt.datetime.now(dt.UTC).strftime('%Y%m%d%H%M%S')}-{os.getpid()}"


def result_path(name: str) -> Path:
    """This run's ``bench/results/<name>-<date>.json`` (``-2``, ``-3``... if an earlier run wrote it)."""
    if name not in _RUN_PATHS:
        dated = path = _dated_path(name)
        number = 2
        while path.exists():
            path, number = dated.with_name(f"{dated.stem}-{number}.json"), number + 1
        _RUN_PATHS[name] = path
    return _RUN_PATHS[name]


def _dated_path(name: str) -> Path:
    return RESULTS_DIR / f"{name}-{dt.datetime.now(dt.UTC).strftime('%Y-%m-%d')}.json"


def write_result(name: str, data: dict, *, key: str | None = None) -> Path:
    """Write this run's ``bench/results/<name>-<date>.json`` (``result_path``) with the run's
    :func:`run_info` under ``"run"``; with ``key``, merge into ``{"runs": {key: data}}`` of the day's
    file, which the runs of one comparison share."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = result_path(name) if key is None else _dated_path(name)
    data = {**data, "run": run_info()}
    if key is None:
        payload = data
    else:
        payload = {"runs": {}}
        if path.exists():
            try:
                payload = json.loads(path.read_text())
                payload.setdefault("runs", {})
            except ValueError:
                payload = {"runs": {}}
        payload["runs"][key] = data
    path.write_text(json.dumps(payload, indent=2, ensure_ascii=False, default=str) + "\n")
    return path
