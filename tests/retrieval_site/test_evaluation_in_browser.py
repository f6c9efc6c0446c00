"""Relevance a curator can prove, in a real browser (Chromium through Playwright) against a live server
and a real Celery worker: judge hits with one click, import more judgments, run evaluations, check the
run page's charts against the figures they draw, and get a gated version refused (32-token chunks)
and then one accepted (a rebuild with the same settings)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base
from knowledge.models import KnowledgeBase
from retrieval.models import VersionGate
from tenants.services import create_tenant
from tests.concurrency import wait_until
from tests.conftest import client_for
from tests.retrieval_site.test_console_in_browser import logged_in  # noqa: F401 - a fixture

pytestmark = pytest.mark.slow

SAMPLE_KB_DIR = Path(__file__).resolve().parents[2] / "sample_kb"
CLICKED = {  # judged on the testing page, one click each
    "camera offline": {"camera-offline.txt": "2", "sky-40117-guardcam-spec.txt": "1"},
    "wifi pairing": {"wifi-pairing.md": "2", "sky-10023908-hub-pro.md": "1", "error-codes.html": "1"},
}
IMPORTED = (  # and imported as CSV on the query set page
    "query,document,grade\n"
    "how long is the warranty of a smart lock,warranty-policy.md,2\n"
    "how long is the warranty of a smart lock,ppr-9087-smart-lock.md,1\n"
    "my camera is offline,camera-offline.txt,2\n"
    "wifi pairing fails,wifi-pairing.md,2\n"
)
TIMEOUT_MS = 180_000


@pytest.fixture
def sample(live_server, embedder):
    """The sample KB in a tenant of its own, its originals kept (a version build re-reads them)."""
    kb = create_knowledge_base(tenant=create_tenant("proof"), name="sample")
    Ingester(kb, keep_originals=True).ingest(discover_files([SAMPLE_KB_DIR]))
    return kb


def figures_of(page, chart: str) -> list[dict]:
    """The marks of a chart as the page holds them: each one's data-* attributes."""
    return page.locator(f"svg#{chart} .point, svg#{chart} .bar, svg#{chart} .marker").evaluate_all(
        "marks => marks.map(mark => Object.assign({}, mark.dataset))"
    )


def run_evaluation(page, live_server, kb, mode: str) -> None:
    page.goto(f"{live_server.url}/admin/retrieval/retrievalrun/query-set/?kb={kb.pk}")
    page.select_option("#id_mode", mode)
    page.click("#evaluate-form input[name=evaluate]")
    expect(page.locator("#figures")).to_be_visible(timeout=TIMEOUT_MS)  # the page reloads when the run ends


def test_a_curator_judges_evaluates_reads_the_charts_and_versions_are_gated(
    logged_in,  # noqa: F811 - the fixture imported above
    live_server,
    celery_worker,
    sample,
    screenshot,
    tmp_path,
):
    page, kb = logged_in, sample
    # 1. Judge hits with one click on the retrieval testing page.
    for query, grades in CLICKED.items():
        page.goto(f"{live_server.url}/admin/retrieval/retrievalrun/")
        if page.locator("select[name=tenant]").count():
            page.select_option("select[name=tenant]", str(kb.tenant.pk))
        page.fill("input[name=query]", query)
        page.click("input[value=Search]")
        for document, grade in grades.items():
            form = page.locator("li.hit form.judge").filter(
                has=page.locator(f'input[name=document][value="{document}"]')
            )
            button = form.first.locator(f"button[name=grade][value='{grade}']")
            button.click()
            expect(button).to_have_class(re.compile(r"\bjudged\b"))
    screenshot(page, "judging")

    # 2. The set: import more judgments as CSV.
    page.click("text=Query sets and evaluations…")
    page.select_option("#kb-choice", str(kb.pk))
    page.click("#query-set-kb input[type=submit]")
    csv_file = tmp_path / "more.csv"
    csv_file.write_text(IMPORTED)
    page.set_input_files("#import-form input[name=file]", str(csv_file))
    page.click("#import-form input[name=import]")
    expect(page.locator(".messagelist")).to_contain_text("Imported 3 queries and 4 judgments")
    expect(page.locator("#query-set tr.judged-query")).to_have_count(5)
    expect(page.locator('#query-set .judgment[data-document="sky-10023908-hub-pro.md"][data-grade="1"]')).to_have_count(
        1
    )

    # 3. Two evaluations; each chart holds the figures of the page.
    run_evaluation(page, live_server, kb, "vector")
    run_evaluation(page, live_server, kb, "hybrid")
    ndcg = float(page.locator("#ndcg").inner_text())
    history = [mark for mark in figures_of(page, "ndcg-history") if "series" in mark]
    assert len(history) == 2 and float(history[-1]["y"]) == ndcg
    bars = figures_of(page, "wins-losses") if page.locator("svg#wins-losses").count() else []
    deltas = [float(cell) for cell in page.locator("#comparison tr td:nth-child(4)").all_inner_texts()]
    assert sorted(round(float(bar["value"]), 4) for bar in bars) == sorted(d for d in deltas if d)
    marker = [mark for mark in figures_of(page, "threshold-curve") if "series" not in mark]
    recommended = page.locator("#recommended").inner_text().split()[0]
    assert [float(mark["x"]) for mark in marker] == [float(recommended)]
    screenshot(page, "evaluation-run")

    # 4. A worse version (32-token chunks) built with activate "gated" is refused and stays ready ...
    client = client_for(kb.tenant, "ingest")
    versions = f"/api/v1/knowledge-bases/{kb.pk}/versions"
    built = client.post(versions, {"chunk_size": 32, "chunk_overlap": 0, "activate": "gated"}, format="json")
    assert built.status_code == 202, built.content
    refused = wait_until(lambda: VersionGate.objects.filter(knowledge_base=kb, version_number=2).first(),
                         timeout=TIMEOUT_MS / 1000, message="the gate of version 2")  # fmt: skip
    assert not refused.passes and not refused.activated
    page.goto(f"{live_server.url}/admin/retrieval/retrievalrun/query-set/?kb={kb.pk}")
    row = page.locator('#versions tr.version-row[data-number="2"]')
    expect(row.locator(".gate-refused")).to_have_text("refused")
    expect(row.locator(".gate-loss")).to_have_count(len(refused.report["losses"]))
    screenshot(page, "version-gate")

    # ... and a rebuild with the same settings as the active one passes and is switched to.
    assert client.post(versions, {"activate": "gated"}, format="json").status_code == 202
    wait_until(lambda: KnowledgeBase.objects.get(pk=kb.pk).active_version.number == 3, timeout=TIMEOUT_MS / 1000,
               message="version 3 to be switched to")  # fmt: skip
    accepted = VersionGate.objects.get(knowledge_base=kb, version_number=3)
    assert accepted.passes and accepted.activated
    page.reload()
    expect(page.locator('#versions tr.version-row[data-number="3"]')).to_have_count(0)  # active, no longer waiting
