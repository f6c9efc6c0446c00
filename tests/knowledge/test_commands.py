"""knowledge's management commands that the ingest tests (tests/tenants/test_commands.py) do not cover."""
from __future__ import annotations

import io
import json
import re

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from knowledge.models import Document

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def load_sample(**options) -> str:
    out = io.StringIO()
    call_command("load_sample", tenant="sample-demo", kb="sample", stdout=out, stderr=io.StringIO(), **options)
    return out.getvalue()


def status_of_search(raw_key: str) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    body = json.dumps({"query": "PPR-9087 smart lock installation"})
    return client.post("/api/v1/retrieval/bm25", data=body, content_type="application/json").status_code


def printed_key(output: str) -> str:
    return re.search(r"^export API_KEY=(\S+)$", output, re.MULTILINE).group(1)


def test_load_sample_prints_a_working_key_and_the_admin_link_for_the_port_served(embedder):
    output = load_sample(base_url="http://127.0.0.1:8765")
    admin_line = r"^Admin console: http://127\.0\.0\.1:8765/admin/  user: admin  password: \S+$"
    assert re.search(admin_line, output, re.MULTILINE)
    assert Document.objects.filter(tenant__name="sample-demo", status=Document.Status.READY).count() > 0
    first_key = printed_key(output)
    assert status_of_search(first_key) == 200

    # A second run keeps the ingested documents, issues a new key and revokes the previous one.
    documents = Document.objects.filter(tenant__name="sample-demo").count()
    second_key = printed_key(load_sample())
    assert Document.objects.filter(tenant__name="sample-demo").count() == documents
    assert status_of_search(second_key) == 200
    assert status_of_search(first_key) == 403


@pytest.mark.django_db(transaction=True)
def test_ingest_async_queues_the_files_for_the_worker(celery_worker, tenant, tmp_path):
    from celery.result import AsyncResult

    (tmp_path / "returns.txt").write_text("Returns are accepted within 30 days of delivery.")
    (tmp_path / "returns.txt.meta.json").write_text(json.dumps({"tags": ["policy"]}))
    out = io.StringIO()
    call_command("ingest", str(tmp_path), tenant=tenant.name, kb="handbook", run_async=True, stdout=out)
    task_id = re.search(r"task (\S+)$", out.getvalue().strip()).group(1)
    assert AsyncResult(task_id).get(timeout=120)["added"] == 1
    document = Document.objects.get(knowledge_base__name="handbook", tenant=tenant)
    assert (document.status, document.tags) == (Document.Status.READY, ["policy"])
