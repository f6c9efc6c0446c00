"""Helpers shared by the benchmark scripts (not a test module; nothing here touches production code).

Each script does ``import _common`` (its own folder is first on ``sys.path`` when run as
``.venv/bin/python bench/<name>.py``) and calls :func:`setup_django` before importing project code.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "bench" / "results"
# The shared datasets sit beside the checkout (../shared/datasets); a git worktree elsewhere sets DATASETS_DIR.
DATASETS_DIR = Path(os.environ.get("DATASETS_DIR") or REPO_ROOT.parent / "shared" / "datasets")


def setup_django(code: Path | None = None) -> None:
    """Configure Django like manage.py does; SIGTERM becomes SystemExit so ``finally`` blocks clean up.
    ``code``: import the project from that checkout instead (e.g. an older commit's, for before/after)."""
    global REPO_ROOT
    if code is not None:
        REPO_ROOT = code.resolve()
    sys.path.insert(0, str(REPO_ROOT))
    os.chdir(REPO_ROOT)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "retrieval_site.settings")
    os.environ.setdefault("LC_ALL", "C.UTF-8")
    os.environ.setdefault("LANG", "C.UTF-8")
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    import django

    django.setup()


def read_jsonl(path: Path, limit: int | None = None) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                rows.append(json.loads(line))
                if limit is not None and len(rows) >= limit:
                    break
    return rows


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


def wait_for_quiet(max_wait_s: float, threshold: float = 1.5) -> float:
    """Wait (up to max_wait_s) until the 1-minute load average drops below threshold; returns the load.
    Other people's jobs on a shared 2-core machine swing the numbers by 2x or more."""
    import time

    deadline = time.monotonic() + max_wait_s
    load = os.getloadavg()[0]
    if max_wait_s > 0 and load >= threshold:
        print(f"waiting up to {max_wait_s:.0f} s for load average < {threshold} (now {load:.2f})", flush=True)
    while max_wait_s > 0 and load >= threshold and time.monotonic() < deadline:
        time.sleep(5)
        load = os.getloadavg()[0]
    return load


def code_fingerprint(paths: list[str]) -> dict:
    """Short SHA-256 of the production files a benchmark exercises (the code changes while we measure);
    a directory counts as all its Python files (the search pipeline is ``retrieval/services``)."""
    import hashlib

    out = {}
    for rel in paths:
        path = REPO_ROOT / rel
        try:
            if path.is_dir():
                content = b"".join(file.name.encode() + file.read_bytes() for file in sorted(path.glob("*.py")))
            else:
                content = path.read_bytes()
            out[rel] = hashlib.sha256(content).hexdigest()[:12]
        except OSError:
            out[rel] = None
    return out


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


# The file each result name writes in this process: a script that writes its result as it goes rewrites
# its own file, and a second run the same day writes <name>-<date>-2.json instead of over the first.
_RUN_PATHS: dict[str, Path] = {}


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
    """Write this run's ``bench/results/<name>-<date>.json`` (``result_path``); with ``key``, merge into
    ``{"runs": {key: data}}`` of the day's file, which the runs of one comparison share."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = result_path(name) if key is None else _dated_path(name)
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


def print_table(headers: list[str], rows: list[list], title: str | None = None) -> None:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    if title:
        print(f"\n{title}")
    line = "  ".join(h.ljust(w) for h, w in zip(cells[0], widths))
    print(line)
    print("  ".join("-" * w for w in widths))
    for row in cells[1:]:
        print("  ".join(c.rjust(w) if _numeric(c) else c.ljust(w) for c, w in zip(row, widths)))


def _numeric(text: str) -> bool:
    try:
        float(text.replace("%", "").replace("x", ""))
        return True
    except ValueError:
        return False


def unique_name(prefix: str) -> str:
    return f"{prefix}-{dt.datetime.now(dt.UTC).strftime('%Y%m%d%H%M%S')}-{os.getpid()}"


def scifact_passages_and_queries() -> tuple[list[str], list[str]]:
    """Every SciFact passage (title + text) and every query text, in file order."""
    corpus = read_jsonl(DATASETS_DIR / "scifact" / "corpus.jsonl")
    passages = [f"{row.get('title', '')} {row.get('text', '')}".strip() for row in corpus]
    queries = [row["text"] for row in read_jsonl(DATASETS_DIR / "scifact" / "queries.jsonl")]
    return passages, queries


def clean_up(result: dict, tenant, tier, *, tenant_prefix: str, then=None) -> dict:
    """Drop the lexical indexes of the bench tenant's KB versions, delete the tenant (cascade) and its
    tier, then run ``then`` (returns more to report, e.g. an index restored). Never raises: a failure
    is reported in the result and on stderr. Also records the load at the end."""
    from engines import get_lexical_index
    from knowledge.models import KnowledgeBaseVersion

    cleanup: dict = {}
    try:
        if tenant is not None:
            versions = KnowledgeBaseVersion.objects.filter(knowledge_base__tenant=tenant).values_list("pk", flat=True)
            for version_id in versions:
                try:
                    get_lexical_index().drop_version(version_id)
                except Exception as exc:  # the tenant is deleted anyway
                    cleanup["lexical_drop_error"] = repr(exc)
            started = time.perf_counter()
            tenant.delete()
            cleanup["tenant_delete_s"] = round(time.perf_counter() - started, 1)
        if tier is not None:
            tier.delete()
        if then is not None:
            cleanup.update(then())
    except Exception as exc:  # cleanup reports and goes on
        cleanup["error"] = repr(exc)
        print(f"CLEANUP FAILED: {exc!r}; delete tenants named {tenant_prefix}-* by hand", file=sys.stderr)
    result["cleanup"] = cleanup
    result["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return cleanup


# --- servers the HTTP benchmarks start on 127.0.0.1 (each in its own process group) ------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_gunicorn(
    port: int, log_path: Path, extra_env: dict[str, str], workers: int = 1, extra_args=(), tree: Path = REPO_ROOT
) -> subprocess.Popen:
    """gunicorn as ``./run serve`` starts it (its config file: the asyncio worker with Django on
    WEB_THREADS threads, TORCH_THREADS=1 unless the environment says otherwise, the model loaded before
    the first request), on 127.0.0.1 only; ``extra_args`` override the config (another worker class).
    ``tree``: the checkout whose code it serves (with its own ``.venv``)."""
    log = open(log_path, "ab")  # noqa: SIM115  # the server writes to it for as long as it runs
    return subprocess.Popen(
        [
            str(tree / ".venv" / "bin" / "gunicorn"),
            "--config",
            "retrieval_site/gunicorn.conf.py",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            "--timeout",
            "120",
            *extra_args,
        ],
        cwd=tree,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "retrieval_site.settings",
            "OPENBLAS_NUM_THREADS": "1",
            **extra_env,
        },
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, so stopping it never touches anything else
    )


def wait_ready(proc: subprocess.Popen, base_url: str, timeout_s: float = 90) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gunicorn exited with code {proc.returncode}")
        try:
            httpx.post(f"{base_url}/api/v1/retrieval/vector", json={}, timeout=5)
            return  # any HTTP answer (401 without a key) means it serves
        except httpx.TransportError:
            time.sleep(0.25)
    raise RuntimeError("gunicorn did not answer in time")


def stop_process(proc: subprocess.Popen, timeout_s: float = 30) -> None:
    """SIGTERM (gunicorn and Celery shut down gracefully on it), then SIGKILL to the group this
    module created for it."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def unlimited_rate_tier(tenant):
    """Put the bench tenant on its own rate tier with a huge limit (the free tier allows 100 requests a
    minute, the benchmarks send far more)."""
    from tenants.models import RateTier

    tier = RateTier.objects.create(name=unique_name("bench"), requests_per_window=10**9, endpoint_limits={})
    tenant.rate_tier = tier
    tenant.save(update_fields=["rate_tier"])
    return tier
