"""The management commands: create_tenant, create_api_key and ingest, run through call_command."""

from __future__ import annotations

import io
import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction
from django.utils import timezone
from rest_framework.test import APIClient

from knowledge.models import Chunk, Document, KnowledgeBase
from tenants.models import ApiKey, Tenant
from tests.conftest import client_with_key

URL = "/api/v1/retrieval/vector"
KEY_PATTERN = re.compile(r"^rk_([0-9a-f]{12})_[A-Za-z0-9_-]{43}$")
SUMMARY = re.compile(
    r"^documents: (?P<added>\d+) added, (?P<unchanged>\d+) unchanged, (?P<replaced>\d+) replaced, "
    r"(?P<failed>\d+) failed; (?P<chunks>\d+) chunks in [0-9.]+ s$"
)


def run(command: str, *args, **options) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(command, *args, stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def search_with(raw_key: str, **body):
    body = json.dumps({"query": "hello", **body})
    return client_with_key(raw_key).post(URL, data=body, content_type="application/json")


# --- create_tenant --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_create_tenant():
    out, _ = run("create_tenant", "acme")
    tenant = Tenant.objects.get(name="acme")
    assert tenant.is_active
    assert out.strip() == f"created tenant acme (id {tenant.pk})"


@pytest.mark.django_db
def test_create_tenant_twice_is_a_command_error():
    run("create_tenant", "acme")
    with pytest.raises(CommandError, match=r"a tenant named 'acme' already exists"):
        run("create_tenant", "acme")
    assert Tenant.objects.filter(name="acme").count() == 1


@pytest.mark.django_db
def test_create_tenant_needs_a_name():
    before = Tenant.objects.count()
    with pytest.raises(CommandError, match="name"):
        run("create_tenant")
    assert Tenant.objects.count() == before


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["x" * 101, ""], ids=["too-long", "empty"])
def test_create_tenant_rejects_an_unusable_name_with_a_command_error(name):
    with pytest.raises(CommandError), transaction.atomic():
        run("create_tenant", name)
    assert not Tenant.objects.filter(name=name).exists()


# --- create_api_key -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_create_api_key_prints_the_key_alone_on_the_last_line_and_it_works():
    run("create_tenant", "acme")
    out, err = run("create_api_key", tenant="acme")

    lines = out.splitlines()
    assert lines, out
    raw_key = lines[-1]
    match = KEY_PATTERN.match(raw_key)
    assert match, raw_key
    assert out.endswith(raw_key + "\n")
    assert raw_key not in err  # the secret goes to stdout only (stderr ends up in logs)

    stored = ApiKey.objects.get(prefix=match.group(1))
    assert stored.tenant.name == "acme"
    assert stored.expires_at is None and stored.revoked_at is None
    assert stored.prefix in err and "acme" in err
    assert raw_key not in {stored.key_hash, stored.prefix}

    response = search_with(raw_key)
    assert response.status_code == 200, response.content
    assert response.json()["results"] == []
    x_api_key = APIClient().post(URL, data='{"query": "q"}', content_type="application/json", HTTP_X_API_KEY=raw_key)
    assert x_api_key.status_code == 200


@pytest.mark.django_db
def test_create_api_key_with_name_and_expiry():
    run("create_tenant", "acme")
    before = timezone.now()
    out, _ = run("create_api_key", tenant="acme", name="ci", expires_in_days=7)
    raw_key = out.splitlines()[-1]
    stored = ApiKey.objects.get(prefix=KEY_PATTERN.match(raw_key).group(1))
    assert stored.name == "ci"
    assert before + timedelta(days=7) <= stored.expires_at <= timezone.now() + timedelta(days=7)
    assert search_with(raw_key).status_code == 200


@pytest.mark.django_db
def test_each_run_issues_a_new_independent_key():
    run("create_tenant", "acme")
    first, second = (run("create_api_key", tenant="acme")[0].splitlines()[-1] for _ in range(2))
    assert first != second
    assert ApiKey.objects.filter(tenant__name="acme").count() == 2
    assert search_with(first).status_code == search_with(second).status_code == 200


@pytest.mark.django_db
def test_create_api_key_for_an_unknown_tenant_is_a_command_error():
    run("create_tenant", "acme")
    before = ApiKey.objects.count()
    with pytest.raises(CommandError, match=r"no tenant named 'ghost'"):
        run("create_api_key", tenant="ghost")
    assert ApiKey.objects.count() == before


@pytest.mark.django_db
def test_create_api_key_requires_tenant():
    with pytest.raises(CommandError, match="--tenant"):
        run("create_api_key")


# --- ingest ---------------------------------------------------------------------------------------

GOOD_FILES = {
    "returns.md": "# Returns\n\nUnopened items may be returned within 30 days for a full refund.",
    "kettle.txt": "The electric kettle boils 1.7 litres of water in under four minutes.",
}
CORRUPT_PDF = b"%PDF-1.7\n1 0 obj << /Type /Catalog /Pages 2 0 R >>\ngarbage without xref or trailer\n"


@pytest.fixture
def folder(tmp_path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    for name, text in GOOD_FILES.items():
        (root / name).write_text(text, encoding="utf-8")
    (root / "broken.pdf").write_bytes(CORRUPT_PDF)
    (root / "ignored.xyz").write_text("an unsupported suffix is not even discovered")
    return root


def summary(out: str) -> dict[str, int]:
    lines = [line for line in out.splitlines() if line.startswith("documents:")]
    assert len(lines) == 1, out
    assert out.splitlines()[-1] == lines[0]  # the summary is the last thing printed
    match = SUMMARY.match(lines[0])
    assert match, lines[0]
    return {key: int(value) for key, value in match.groupdict().items()}


@pytest.mark.slow
@pytest.mark.django_db
def test_ingest_reports_added_failed_then_unchanged(folder, embedder):
    run("create_tenant", "acme")
    out, err = run("ingest", str(folder), tenant="acme", kb="docs", no_progress=True)

    kb = KnowledgeBase.objects.get(tenant__name="acme", name="docs")
    assert f"created knowledge base docs (id {kb.pk}" in out
    assert "2 added" in out and "1 failed" in out
    first = summary(out)
    assert first == {"added": 2, "unchanged": 0, "replaced": 0, "failed": 1, "chunks": first["chunks"]}
    assert first["chunks"] == Chunk.objects.filter(knowledge_base=kb).count() >= 2
    assert re.search(r"^failed: docs/broken\.pdf: .+", err, re.MULTILINE), err

    documents = {doc.source_uri: doc for doc in Document.objects.filter(knowledge_base=kb)}
    assert set(documents) == {"docs/returns.md", "docs/kettle.txt", "docs/broken.pdf"}
    assert documents["docs/broken.pdf"].status == Document.Status.FAILED
    assert documents["docs/broken.pdf"].error
    assert documents["docs/broken.pdf"].error in err
    assert {documents[uri].status for uri in ("docs/returns.md", "docs/kettle.txt")} == {Document.Status.READY}
    chunk_ids = set(Chunk.objects.filter(knowledge_base=kb).values_list("pk", flat=True))

    # Re-run: the good files are skipped, the corrupt one is retried and fails again.
    out, err = run("ingest", str(folder), tenant="acme", kb="docs", no_progress=True)
    assert "created knowledge base" not in out
    assert "2 unchanged" in out and "1 failed" in out
    assert summary(out) == {"added": 0, "unchanged": 2, "replaced": 0, "failed": 1, "chunks": 0}
    assert "failed: docs/broken.pdf" in err
    assert set(Chunk.objects.filter(knowledge_base=kb).values_list("pk", flat=True)) == chunk_ids
    assert Document.objects.filter(knowledge_base=kb).count() == 3

    # An edited file is replaced, the other one stays unchanged.
    (folder / "kettle.txt").write_text("The kettle now boils water in two minutes.", encoding="utf-8")
    out, _ = run("ingest", str(folder), tenant="acme", kb="docs", no_progress=True)
    assert summary(out) | {"chunks": 0} == {"added": 0, "unchanged": 1, "replaced": 1, "failed": 1, "chunks": 0}
    kettle = Chunk.objects.get(document__source_uri="docs/kettle.txt")
    assert kettle.content == "The kettle now boils water in two minutes."


@pytest.mark.slow
@pytest.mark.django_db
def test_ingested_files_are_searchable_with_a_key_from_the_command(folder, embedder):
    run("create_tenant", "acme")
    run("ingest", str(folder), tenant="acme", kb="docs", no_progress=True)
    raw_key = run("create_api_key", tenant="acme")[0].splitlines()[-1]
    response = search_with(raw_key, query="How quickly does the kettle boil water?")
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert [hit["source_uri"] for hit in results][0] == "docs/kettle.txt"
    assert {hit["source_uri"] for hit in results} == {"docs/kettle.txt", "docs/returns.md"}  # nothing from the pdf


@pytest.mark.django_db
def test_ingest_for_an_unknown_tenant_is_a_command_error(folder):
    before = KnowledgeBase.objects.count()
    with pytest.raises(CommandError, match=r"no tenant named 'ghost'"):
        run("ingest", str(folder), tenant="ghost", kb="docs", no_progress=True)
    assert KnowledgeBase.objects.count() == before


@pytest.mark.django_db
def test_ingest_of_a_missing_path_is_a_command_error(tmp_path):
    run("create_tenant", "acme")
    missing = tmp_path / "nope"
    with pytest.raises(CommandError, match=r"no such file or directory: .*nope"):
        run("ingest", str(missing), tenant="acme", kb="docs", no_progress=True)
    assert not KnowledgeBase.objects.filter(tenant__name="acme").exists()


@pytest.mark.slow
@pytest.mark.django_db
def test_ingest_creates_a_parent_child_knowledge_base(folder, embedder):
    from knowledge.models import ParentChunk

    run("create_tenant", "acme")
    out, _ = run(
        "ingest", str(folder), tenant="acme", kb="docs", no_progress=True, chunking="parent_child",
        chunk_size=32, parent_chunk_size=64,
    )  # fmt: skip
    kb = KnowledgeBase.objects.get(tenant__name="acme", name="docs")
    assert (kb.chunking, kb.chunk_size, kb.parent_chunk_size) == ("parent_child", 32, 64)
    assert "32 tokens per chunk, parent_child chunking" in out and summary(out)["added"] == 2
    chunks = Chunk.objects.filter(knowledge_base=kb)
    assert chunks.exists() and not chunks.filter(parent=None).exists()  # every child has its parent passage
    assert ParentChunk.objects.filter(document__knowledge_base=kb).count() >= 2


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"parent_chunk_size": 256}, r"parent_chunk_size applies to chunking parent_child only"),
        ({"chunking": "parent_child", "chunk_size": 300, "parent_chunk_size": 100}, r"must not exceed"),
        ({"model": "no-such-model"}, r"no-such-model"),
    ],
)
def test_ingest_with_a_chunking_or_model_it_cannot_build_is_a_command_error(folder, options, message):
    run("create_tenant", "acme")
    with pytest.raises(CommandError, match=message):
        run("ingest", str(folder), tenant="acme", kb="docs", no_progress=True, **options)
    assert not KnowledgeBase.objects.filter(tenant__name="acme").exists()
