"""What ``bench.lifecycle`` drives: the service's API over
HTTP (uploads, tasks, versions, searches) and a search load running beside the part measured, with the
latency summary of what it recorded."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

from bench.harness import stats

TASK_DONE = {"SUCCESS", "FAILURE"}


class Api:
    """The few calls of the knowledge API the benchmark makes (one HTTP client per thread)."""

    def __init__(self, base: str, key: str):
        import httpx

        self.client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=120)

    def create_kb(self, name: str) -> int:
        response = self.client.post("/api/v1/knowledge-bases", json={"name": name})
        response.raise_for_status()
        return response.json()["id"]

    def upload(self, kb_id: int, paths: list[Path]) -> str:
        files = [("files", (path.name, path.read_bytes(), "text/plain")) for path in paths]
        response = self.client.post(f"/api/v1/knowledge-bases/{kb_id}/documents", files=files)
        if response.status_code != 202:
            raise RuntimeError(f"upload answered {response.status_code}: {response.text[:300]}")
        return response.json()["task_id"]

    def wait_tasks(self, task_ids: list[str], poll_s: float = 0.2) -> list[dict]:
        """Poll each task until it is done; their final states, in order."""
        done: dict[str, dict] = {}
        while len(done) < len(task_ids):
            for task_id in task_ids:
                if task_id not in done:
                    state = self.client.get(f"/api/v1/tasks/{task_id}").json()
                    if state.get("state") in TASK_DONE:
                        done[task_id] = state
            if len(done) < len(task_ids):
                time.sleep(poll_s)
        return [done[task_id] for task_id in task_ids]

    def build_version(self, kb_id: int, body: dict) -> tuple[str, int]:
        response = self.client.post(f"/api/v1/knowledge-bases/{kb_id}/versions", json=body)
        if response.status_code != 202:
            raise RuntimeError(f"version build answered {response.status_code}: {response.text[:300]}")
        data = response.json()
        return data["task_id"], data["version"]["number"]

    def activate(self, kb_id: int, number: int) -> tuple[int, float]:
        started = time.perf_counter()
        response = self.client.post(f"/api/v1/knowledge-bases/{kb_id}/versions/{number}/activate")
        return response.status_code, time.perf_counter() - started

    def read_kb(self, kb_id: int) -> float:
        """A cheap authenticated request (one KB read), timed: the yardstick for the activation's."""
        started = time.perf_counter()
        self.client.get(f"/api/v1/knowledge-bases/{kb_id}").raise_for_status()
        return time.perf_counter() - started


class SearchLoad:
    """Clients (threads) sending hybrid searches back to back, to each of ``bases`` in turn; each
    answer is recorded with its start and end (perf_counter), status, chunk ids and whether the
    cache answered."""

    def __init__(self, bases: list[str], key: str, kb_id: int, queries, clients: int, top_k: int = 10):
        self.bases, self.key, self.kb_id, self.clients, self.top_k = bases, key, kb_id, clients, top_k
        self._queries, self._lock = queries, threading.Lock()
        self.records: list[dict] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def _next_query(self) -> str:
        with self._lock:
            return next(self._queries)

    def _client(self) -> None:
        import httpx

        headers = {"Authorization": f"Bearer {self.key}"}
        with httpx.Client(headers=headers, timeout=60) as client:
            for base in itertools.cycle(self.bases):
                if self._stop.is_set():
                    break
                body = {"query": self._next_query(), "top_k": self.top_k, "kb_ids": [self.kb_id]}
                started = time.perf_counter()
                record = {"start": started, "chunk_ids": [], "cached": False, "degraded": []}
                try:
                    response = client.post(f"{base}/api/v1/retrieval/hybrid", json=body)
                    record["status"] = response.status_code
                    if response.status_code == 200:
                        data = response.json()
                        record["chunk_ids"] = [hit["chunk_id"] for hit in data["results"]]
                        record["cached"] = data["cached"]
                        record["degraded"] = [d["stage"] for d in data["degraded"]]
                    else:
                        record["error"] = response.text[:200]
                except httpx.HTTPError as exc:
                    record["status"] = type(exc).__name__
                record["end"] = time.perf_counter()
                with self._lock:
                    self.records.append(record)

    def __enter__(self) -> SearchLoad:
        self._threads = [threading.Thread(target=self._client, daemon=True) for _ in range(self.clients)]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)


def latency_summary(records: list[dict]) -> dict:
    ok = [r["end"] - r["start"] for r in records if r["status"] == 200]
    failed = [r for r in records if r["status"] != 200]
    return {
        **stats.summarize_ms(ok),
        "errors": len(failed),
        "error_samples": [f"{r['status']}: {r.get('error', '')}" for r in failed[:5]],
        "degraded": sum(bool(r["degraded"]) for r in records),
        "cached": sum(r["cached"] for r in records),
    }
