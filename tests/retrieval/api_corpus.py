"""The API tests' corpus, written into ``tmp_path`` and ingested with the real ``ingest`` command and the
real all-MiniLM-L6-v2 model (one short passage per file, each on a clearly different topic), and the
helpers that call the API and check its one response and error shape."""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from django.core.management import call_command

from knowledge.models import Document, KnowledgeBase
from tests.conftest import client_for

URL = "/api/v1/retrieval/vector"
HIT_KEYS = {
    "chunk_id", "doc_id", "kb_id", "content", "score", "source", "rank",
    "title", "source_uri", "doc_type", "metadata", "section", "relevance",
    "fused_score", "rerank_score", "retrievers", "matched_queries", "document_score", "passages",
    "parent_id", "children",
}  # fmt: skip
RESPONSE_KEYS = {
    "results", "total", "latency_ms", "request_id", "mode", "queries", "weights", "reranked", "cached",
    "degraded", "notes", "notices", "candidates", "timings_ms", "critical_path_ms", "cost",
}  # fmt: skip
GENERATED_ID = re.compile(r"^[0-9a-f]{32}$")

RETURNS = (
    "# Returns and refunds\n\n"
    "Customers may return unopened items within 30 days of delivery and receive a full refund "
    "to their original payment method."
)
KETTLE = (
    "The stainless steel electric kettle boils 1.7 litres of water in under four minutes "
    "and switches itself off automatically when the water boils."
)
GARDEN = (
    "<html><head><title>Growing tomatoes</title></head><body>"
    "<p>Tomato seedlings need at least six hours of direct sunlight every day "
    "and should be watered deeply each morning.</p></body></html>"
)
JUPITER = "Jupiter is the largest planet in the solar system and is orbited by dozens of moons."
VAULT = "The vault combination for the Zurich branch is written in the blue ledger kept under the clock tower."

MANUALS = {
    "returns.md": (RETURNS, {"title": "Return policy", "tags": ["policy", "returns"],
                             "metadata": {"region": "eu", "priority": 3, "shop": {"id": 7}}}),
    "kettle.txt": (KETTLE, {"title": "Kettle manual", "tags": ["product"],
                            "metadata": {"region": "us", "priority": 1}}),
    "garden.html": (GARDEN, {"tags": ["hobby", "outdoor"], "metadata": {"region": "eu", "priority": 2}}),
}  # fmt: skip
ASTRONOMY = {"jupiter.txt": (JUPITER, {"tags": ["space"], "metadata": {"region": "intl"}})}


def write_files(folder: Path, files: dict[str, tuple[str, dict | None]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, (text, sidecar) in files.items():
        (folder / name).write_text(text, encoding="utf-8")
        if sidecar is not None:
            (folder / f"{name}.meta.json").write_text(json.dumps(sidecar), encoding="utf-8")
    return folder


def ingest(folder: Path, tenant, kb_name: str) -> KnowledgeBase:
    out = io.StringIO()
    call_command(
        "ingest", str(folder), tenant=tenant.name, kb=kb_name, no_progress=True, stdout=out, stderr=io.StringIO()
    )
    assert " 0 failed" in out.getvalue(), out.getvalue()
    return KnowledgeBase.objects.get(tenant=tenant, name=kb_name)


@dataclass
class Corpus:
    tenant: object
    client: object
    kbs: dict[str, KnowledgeBase]
    docs: dict[str, Document] = field(default_factory=dict)  # by file name

    def doc(self, name: str) -> Document:
        return self.docs[name]


def build_corpus(tmp_path: Path, tenant, layout: dict[str, dict]) -> Corpus:
    kbs, docs = {}, {}
    for kb_name, files in layout.items():
        kb = ingest(write_files(tmp_path / tenant.name / kb_name, files), tenant, kb_name)
        kbs[kb_name] = kb
        for document in Document.objects.filter(knowledge_base=kb):
            docs[Path(document.source_uri).name] = document
    return Corpus(tenant=tenant, client=client_for(tenant), kbs=kbs, docs=docs)


def search(client, body, **extra):
    return client.post(URL, data=json.dumps(body), content_type="application/json", **extra)


def ok_results(response) -> list[dict]:
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["total"] == len(body["results"])
    assert body["request_id"] == response["X-Request-ID"]
    return body["results"]


def file_names(results) -> list[str]:
    return [Path(hit["source_uri"]).name for hit in results]


def assert_error(response, status: int, code: str, *needles: str) -> dict:
    """The one error shape: JSON ``{"error": {code, message, request_id}}`` tied to the X-Request-ID header."""
    assert response.status_code == status, (response.status_code, response.content)
    assert response["Content-Type"].startswith("application/json")
    body = json.loads(response.content)
    assert set(body) == {"error"}
    error = body["error"]
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"], error
    for needle in needles:
        assert needle.lower() in error["message"].lower(), (needle, error["message"])
    assert error["request_id"] == response["X-Request-ID"]
    assert GENERATED_ID.match(error["request_id"])
    return error


def post_to(client, path: str, body: dict):
    return client.post(f"/api/v1/retrieval/{path}", data=json.dumps(body), content_type="application/json")
