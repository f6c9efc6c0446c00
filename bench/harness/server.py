"""The service as ``./run serve`` starts it, on 127.0.0.1 only, each process in its own process group so
stopping it never touches anything else: gunicorn (its config file: the asyncio worker with Django on
WEB_THREADS threads, the model loaded before the first request) and a Celery worker. The embedded
PostgreSQL and Redis under ``var/`` are the ones the settings attach to (started on first use)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from bench.harness.project import REPO_ROOT


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_gunicorn(
    port: int, log_path: Path, extra_env: dict[str, str], workers: int = 1, extra_args=(), tree: Path = REPO_ROOT
) -> subprocess.Popen:
    """gunicorn on ``port`` (TORCH_THREADS=1 unless the environment says otherwise); ``extra_args``
    come first and override the config (another app or worker class of an older tree). ``tree``: the
    checkout whose code it serves (with its own ``.venv``)."""
    command = [str(tree / ".venv" / "bin" / "gunicorn"), *extra_args, "--config", "retrieval_site/gunicorn.conf.py"]
    command += ["--bind", f"127.0.0.1:{port}", "--workers", str(workers), "--timeout", "120"]
    return _spawn(command, tree, log_path, {"OPENBLAS_NUM_THREADS": "1", **extra_env})


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


@contextlib.contextmanager
def gunicorn(log_path: Path, extra_env: dict[str, str], **options) -> Iterator[tuple[str, subprocess.Popen]]:
    """A gunicorn (:func:`start_gunicorn`'s ``options``) serving for the ``with`` block: (base URL,
    process). Stopped when the block ends; on an exception the log's tail goes to stderr first."""
    port = free_port()
    proc = start_gunicorn(port, log_path, extra_env, **options)
    try:
        base_url = f"http://127.0.0.1:{port}"
        wait_ready(proc, base_url)
        yield base_url, proc
    except BaseException:
        if log_path.exists():
            print("gunicorn log tail:\n" + log_path.read_text(errors="replace")[-3000:], file=sys.stderr)
        raise
    finally:
        stop_process(proc)


def start_worker(log_path: Path, concurrency: int) -> subprocess.Popen:
    """A Celery worker like ``./run serve``'s."""
    command = [str(REPO_ROOT / ".venv" / "bin" / "celery"), "-A", "retrieval_site", "worker"]
    command += ["--concurrency", str(concurrency), "--loglevel", "warning", "--without-mingle", "--without-gossip"]
    return _spawn(command, REPO_ROOT, log_path, {})


def _spawn(command: list[str], cwd: Path, log_path: Path, extra_env: dict[str, str]) -> subprocess.Popen:
    """``command`` in its own process group (so stopping it never touches anything else), its output
    appended to ``log_path``."""
    log = open(log_path, "ab")  # noqa: SIM115  # the process writes to it for as long as it runs
    return subprocess.Popen(
        command,
        cwd=cwd,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "retrieval_site.settings", **extra_env},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_worker(proc: subprocess.Popen, timeout_s: float = 120) -> None:
    from retrieval_site.celery import app

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the Celery worker exited with code {proc.returncode}")
        if app.control.ping(timeout=1.0):
            return
    raise RuntimeError("the Celery worker did not answer in time")


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


def tree_rss(pid: int) -> int:
    """Resident memory of a process and its children (gunicorn's master and workers), in bytes."""
    total = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        if int(status.parent.name) == pid or int(fields.get("PPid", "0")) == pid:
            total += int(fields.get("VmRSS", "0 kB").split()[0]) * 1024
    return total


def workers_cpu_s(proc: subprocess.Popen) -> float:
    """CPU seconds (user + system, all threads) the gunicorn's workers (its arbiter's children) used so far."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # a worker that just exited
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total
