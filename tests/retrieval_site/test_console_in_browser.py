"""The admin console in a real browser (Chromium through Playwright) against a live server: log in,
run retrieval tests, curate, and see every console page render."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from graph.community_build import rebuild_communities
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base
from knowledge.models import DictionaryTerm, Document
from retrieval import search_log
from tenants.services import create_api_key, create_tenant

pytestmark = pytest.mark.slow

SAMPLE_TROUBLESHOOTING = Path(__file__).resolve().parents[2] / "sample_kb" / "troubleshooting"
ORDER_QUERY = "帮我查下订单 ORD-2026-000817 的进度"
PASSWORD = "console-test-password"


@pytest.fixture
def order_kb(live_server, embedder):
    """The sample's troubleshooting folder (the order-status passage among others) in a fresh tenant.
    Not the session's ``sample_kb``: a live server's test flushes the database after it."""
    kb = create_knowledge_base(tenant=create_tenant("shop"), name="troubleshooting")
    Ingester(kb).ingest(discover_files([SAMPLE_TROUBLESHOOTING]))
    return kb


@pytest.fixture
def logged_in(page, live_server):
    User.objects.create_superuser("admin", password=PASSWORD)
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#site-name")
    return page


def test_the_order_query_shows_the_order_status_passage_first_highlighted_with_leg_bars(
    logged_in, live_server, order_kb, screenshot
):
    page = logged_in
    screenshot(page, "index")
    page.click("text=Retrieval testing")
    assert page.locator("text=No runs yet").is_visible()
    if page.locator("select[name=tenant]").count():  # other tests' tenants may exist: pick this one's
        page.select_option("select[name=tenant]", str(order_kb.tenant.pk))
    page.fill("input[name=query]", ORDER_QUERY)
    page.click("input[value=Search]")
    first = page.locator("li.hit").first
    assert "order-status.md" in first.locator(".source").inner_text()
    assert "ORD-2026-000817" in first.locator(".passage mark").all_inner_texts()
    assert first.locator(".leg-bm25 .bar span").get_attribute("style") == "width: 100%"
    assert page.locator("table.summary").inner_text().count("Timings (ms)") == 1
    screenshot(page, "retrieval-testing")

    # The run is in the history; one click runs it again.
    expect(page.locator("#history tbody tr, #history tr").filter(has_text=ORDER_QUERY)).to_have_count(1)
    page.click("#history button:text('Re-run')")
    expect(page.locator("#history tr").filter(has_text=ORDER_QUERY)).to_have_count(2)
    assert "ORD-2026-000817" in page.locator("li.hit").first.locator(".passage mark").all_inner_texts()

    # Curating: protecting the order number opens the add form prefilled from the query.
    page.locator("span.term").filter(has_text="ORD-2026-000817").locator("a.add-protected").click()
    assert page.input_value("#id_value") == "ORD-2026-000817"
    page.click("input[name=_save]")
    expect(page.locator(".messagelist")).to_contain_text("was added successfully")
    assert DictionaryTerm.objects.get(tenant=order_kb.tenant).value == "ORD-2026-000817"


def test_the_graph_global_scope_lists_communities_with_their_passages(logged_in, live_server, order_kb, screenshot):
    assert rebuild_communities(order_kb.active_version) > 0
    page = logged_in
    page.goto(f"{live_server.url}/admin/retrieval/retrievalrun/")
    if page.locator("select[name=tenant]").count():
        page.select_option("select[name=tenant]", str(order_kb.tenant.pk))
    page.fill("input[name=query]", "firmware update failed")
    page.select_option("select[name=mode]", "graph")
    page.select_option("select[name=graph_scope]", "global")
    page.click("input[value=Search]")
    first = page.locator("li.community").first
    key_entities = first.locator(".key-entities").inner_text()
    assert key_entities.startswith("key entities: ")
    assert first.locator(".summary-text").inner_text().startswith("Key entities: " + key_entities.split(": ", 1)[1])
    supporting = first.locator("details.supporting").first
    expect(supporting.locator(".passage")).to_be_hidden()
    supporting.locator("summary").click()  # a supporting passage opens in place
    expect(supporting.locator(".passage")).to_be_visible()
    assert page.locator("table.summary").inner_text().count("communities") == 1
    screenshot(page, "retrieval-testing-graph-global")


def test_compare_shows_two_settings_side_by_side(logged_in, live_server, order_kb, screenshot):
    page = logged_in
    page.goto(f"{live_server.url}/admin/retrieval/retrievalrun/compare/")
    page.fill("input[name=query]", "order refund pending")
    page.select_option("select[name=b-mode]", "bm25")
    page.click("input[value=Compare]")
    left, right = page.locator(".side-1"), page.locator(".side-2")
    # the click only starts the form's navigation: wait for the answer's page before reading it
    expect(left.locator("li.hit").first).to_be_visible()
    expect(right.locator("li.hit").first).to_be_visible()
    assert right.locator(".summary").inner_text().startswith("Queries")
    marks = right.locator(".moved").all_inner_texts()
    assert marks and all(re.fullmatch(r"new|=|[↑↓]\d+", mark) for mark in marks)
    screenshot(page, "compare")


def test_an_api_key_is_created_and_the_other_console_pages_render(logged_in, live_server, order_kb, screenshot):
    page = logged_in
    page.goto(f"{live_server.url}/admin/tenants/apikey/add/")
    page.select_option("#id_tenant", label=order_kb.tenant.name)
    page.fill("#id_name", "browser")
    page.click("input[name=_save]")
    expect(page.locator(".messagelist")).to_contain_text("shown this once")
    message = page.locator(".messagelist").inner_text()
    raw_key = re.search(r"shown this once \(copy it now\): (rk_[0-9a-f]+_\S+)", message).group(1)
    screenshot(page, "api-keys")
    latencies = []  # the server's, as each answer says
    for query in (ORDER_QUERY, ORDER_QUERY, "firmware update failed", "consignment"):
        search = page.request.post(f"{live_server.url}/api/v1/retrieval/bm25", data={"query": query},
                                   headers={"Authorization": f"Bearer {raw_key}"})  # fmt: skip
        assert search.ok, search.text()
        latencies.append(search.json()["latency_ms"])

    page.goto(f"{live_server.url}/admin/tenants/tenant/")
    page.click("a.dashboard-link")
    expect(page.locator("#content h1")).to_have_text(f"Dashboard: {order_kb.tenant.name}")
    assert page.locator("#daily tr").count() == 15  # a header and 14 days
    assert page.locator("#top-queries tr").first.inner_text().split("\t") == [ORDER_QUERY.casefold(), "2"]
    assert page.locator("#no-result-queries").inner_text().split("\t") == ["consignment", "1"]
    expect(page.locator("h2", has_text="Rate tier")).to_contain_text(order_kb.tenant.rate_tier.name)
    # The latency chart draws today's p50 and p95 (the 2nd and 4th of the four answers' latencies, within
    # the day's histogram's 5 % buckets), one point each: the 13 days before had no search.
    chart = page.locator("svg#daily-latency")
    expect(chart).to_be_visible()
    drawn = {
        share: chart.locator(f"circle.latency-{share}").evaluate_all(
            "marks => marks.map(m => [m.dataset.x, m.dataset.y])"
        )
        for share in ("p50", "p95")
    }
    assert {share: [float(x) for x, _ in points] for share, points in drawn.items()} == {"p50": [13.0], "p95": [13.0]}
    ordered = sorted(latencies)
    for share, exact in (("p50", ordered[1]), ("p95", ordered[3])):
        assert exact - 0.01 <= float(drawn[share][0][1]) <= exact * 1.05 + 0.01, (share, latencies, drawn)
    shown = re.fullmatch(r"([\d.]+) / ([\d.]+) ms", page.locator("#daily tr").last.locator("td.latency").inner_text())
    assert [float(shown.group(i)) for i in (1, 2)] == pytest.approx(
        [float(drawn[s][0][1]) for s in ("p50", "p95")], abs=0.051
    )  # the table's, to 0.1 ms
    screenshot(page, "tenant-dashboard")

    page.goto(f"{live_server.url}/admin/knowledge/knowledgebase/")
    page.click("a.glance-link")
    row = page.locator("tr.kb", has_text="troubleshooting")
    files = len(discover_files([SAMPLE_TROUBLESHOOTING]))
    assert row.locator(".statuses").inner_text() == f"pending 0, ready {files}, failed 0, removed 0"
    assert int(row.locator(".chunks").inner_text()) == order_kb.active_version.chunks.count()
    screenshot(page, "knowledge-bases")


def test_an_imported_synonyms_csv_changes_what_a_query_finds(logged_in, live_server, order_kb, tmp_path, screenshot):
    page = logged_in
    page.goto(f"{live_server.url}/admin/retrieval/retrievalrun/")
    page.fill("input[name=query]", "consignment")
    page.select_option("select[name=mode]", "bm25")
    page.click("input[value=Search]")
    expect(page.locator("p.empty").first).to_contain_text("No hits")

    csv_file = tmp_path / "synonyms.csv"
    csv_file.write_text('terms,replacements,weight,active\n"consignment, order",,0.8,true\n', encoding="utf-8")
    page.goto(f"{live_server.url}/admin/knowledge/synonym/")
    page.click("a.import-link")
    page.select_option("select[name=tenant]", label=order_kb.tenant.name)
    page.set_input_files("input[name=file]", str(csv_file))
    page.click("input[name=preview]")
    expect(page.locator("#plan-summary")).to_contain_text("1 to add, 0 to update, 0 unchanged, 0 lines with errors")
    expect(page.locator("#plan-add")).to_contain_text("consignment, order")
    screenshot(page, "synonyms-import")
    page.click("input[name=apply]")
    expect(page.locator(".messagelist")).to_contain_text("1 added")

    page.goto(f"{live_server.url}/admin/retrieval/retrievalrun/")
    page.click("#history button:text('Re-run')")
    expect(page.locator("table.summary")).to_contain_text("order (synonym, weight 0.8)")
    expect(page.locator("li.hit").first).to_be_visible()
    assert "order" in [mark.lower() for mark in page.locator("li.hit").first.locator("mark").all_inner_texts()]


def test_search_analytics_list_what_clients_asked_and_a_synonym_from_there_closes_the_gap(
    logged_in, live_server, order_kb, screenshot
):
    raw_key = create_api_key(tenant=order_kb.tenant).raw_key
    page = logged_in

    def search(query: str) -> dict:
        answer = page.request.post(f"{live_server.url}/api/v1/retrieval/bm25", data={"query": query},
                                   headers={"Authorization": f"Bearer {raw_key}"})  # fmt: skip
        assert answer.ok, answer.text()
        return answer.json()

    for query in (ORDER_QUERY, ORDER_QUERY, ORDER_QUERY, "consignment", "consignment"):
        search(query)
    assert search_log.flush() == 5  # the live server's rows, written here rather than by the writer thread

    open_lifecycle(page, live_server, order_kb)
    page.click("#kb-analytics")
    expect(page.locator("#content h1")).to_have_text("Search analytics")
    top = page.locator("#top tr.query-row").first
    assert top.locator(".query").inner_text() == ORDER_QUERY.casefold()
    assert (top.locator(".volume").inner_text(), top.locator(".trend").inner_text()) == ("3", "new")
    gap = page.locator("#no-results tr.query-row", has_text="consignment")
    expect(gap.locator(".volume")).to_have_text("2")
    screenshot(page, "search-analytics")

    # The row's test link opens the testing page with the query, its mode and the KB filled in.
    gap.locator("a.test-link").click()
    assert page.input_value("input[name=query]") == "consignment"
    assert page.input_value("select[name=mode]") == "bm25"
    page.click("input[value=Search]")
    expect(page.locator("p.empty").first).to_contain_text("No hits")

    # Its synonym action: the add form holds the query's term; the curator adds what it means.
    page.go_back()
    page.go_back()
    page.locator("#no-results tr.query-row", has_text="consignment").locator("a.add-synonym").click()
    assert page.input_value("#id_terms") == "consignment"
    page.fill("#id_terms", "consignment,order")
    page.click("input[name=_save]")
    expect(page.locator(".messagelist")).to_contain_text("was added successfully")

    after = search("consignment")
    assert after["cached"] is False and after["total"] > 0  # the cached empty answer is not served again
    assert any("order" in hit["content"].lower() for hit in after["results"])


# --- a knowledge base's lifecycle, with a real worker -------------------------------------------------

LOCK = "# PPR-9087 lock\n\nThe PPR-9087 lock fits doors 35 to 80 mm thick. Fit it with the two screws supplied."
RETURNS = "Returns are accepted within 30 days of delivery with the receipt; refunds take five working days."


@pytest.fixture
def manuals(tmp_path):
    folder = tmp_path / "manuals"
    folder.mkdir()
    (folder / "lock.md").write_text(LOCK, encoding="utf-8")
    (folder / "returns.txt").write_text(RETURNS, encoding="utf-8")
    return folder


def open_lifecycle(page, live_server, kb):
    page.goto(f"{live_server.url}/admin/knowledge/knowledgebase/glance/")
    page.locator("tr.kb", has_text=kb.tenant.name).locator("a.lifecycle-link").click()
    expect(page.locator("#content h1")).to_have_text(f"{kb.name} ({kb.tenant.name})")


def test_a_file_uploaded_in_the_console_reaches_ready(logged_in, live_server, celery_worker, manuals):
    kb = create_knowledge_base(tenant=create_tenant("uploads"), name="manuals")
    page = logged_in
    open_lifecycle(page, live_server, kb)
    expect(page.locator("#documents .empty")).to_contain_text("No documents yet: upload files above")
    page.set_input_files("input[name=files]", [str(manuals / "lock.md"), str(manuals / "returns.txt")])
    with page.expect_response(lambda response: response.request.method == "POST") as sent:
        page.click("#upload-form input[type=submit]")
    # Sent by the page's script (which shows the upload's progress), answered with where to go (a form: 302).
    assert sent.value.request.headers["x-requested-with"] == "XMLHttpRequest" and sent.value.status == 200
    expect(page.locator(".messagelist")).to_contain_text("Queued 2 file(s) for ingestion")
    for name in ("lock.md", "returns.txt"):  # the page follows the task and reloads when it ends
        expect(page.locator(f'tr.document[data-name="{name}"] .status')).to_have_text("ready", timeout=120_000)
    task = page.locator("#tasks tr.task-row").first
    expect(task.locator(".task-state")).to_have_text("SUCCESS 2/2 documents")
    assert task.locator("progress").get_attribute("value") == "100"
    expect(page.locator("#summary .statuses")).to_have_text("pending 0, ready 2, failed 0, removed 0")
    assert Document.objects.filter(knowledge_base=kb, status="ready").count() == 2


def test_a_version_is_built_activated_and_rolled_back_in_the_console(
    logged_in, live_server, celery_worker, manuals, screenshot
):
    kb = create_knowledge_base(tenant=create_tenant("versions"), name="manuals")
    Ingester(kb, keep_originals=True).ingest(discover_files([manuals]))  # a build re-reads the stored files
    page = logged_in
    open_lifecycle(page, live_server, kb)
    page.fill("#build-form input[name=chunk_size]", "64")
    page.click("#build-form input[type=submit]")
    expect(page.locator(".messagelist")).to_contain_text("Building version 2")
    version_2 = page.locator('tr.version[data-version="2"]')
    expect(version_2.locator(".status")).to_have_text("ready", timeout=120_000)  # reloaded when the build ends

    version_2.locator("input[value=Activate]").click()
    expect(page.locator(".messagelist")).to_contain_text("Version 2 is active: searches use it now.")
    expect(page.locator("#summary .active-version")).to_contain_text("v2: ")
    expect(page.locator("#summary .active-version")).to_contain_text("chunks of 64 tokens")
    expect(page.locator('tr.version[data-version="1"] .status')).to_have_text("retired")
    screenshot(page, "knowledge-base")

    page.locator('tr.version[data-version="1"]').locator("input[value='Roll back to v1']").click()
    expect(page.locator(".messagelist")).to_contain_text("Version 1 is active")
    expect(page.locator('tr.version[data-version="2"] .status')).to_have_text("retired")
    kb.refresh_from_db()
    assert kb.active_version.number == 1 and kb.chunk_size != 64


def test_a_curator_merges_an_entity_on_the_graph_page_and_it_holds_through_reingestion(
    logged_in, live_server, embedder, tmp_path, screenshot
):
    from dataclasses import replace

    from knowledge.models import GraphEntity

    folder = tmp_path / "docs"  # not tmp_path itself: the screenshots land there, and PNGs are documents too
    folder.mkdir()
    (folder / "lock.txt").write_text("The PPR-9087 door lock is made by Skyline Home.", encoding="utf-8")
    (folder / "recall.txt").write_text("Skyline Homes recalled the AirSense monitor SKY-30452.", encoding="utf-8")
    kb = create_knowledge_base(tenant=create_tenant("locks"), name="locks", chunk_size=120, chunk_overlap=0)
    Ingester(kb).ingest(discover_files([folder]))
    page = logged_in
    graph_page = f"{live_server.url}/admin/knowledge/graphentity/?version={kb.active_version_id}"
    page.goto(f"{graph_page}&q=ppr-9087")
    page.get_by_role("link", name="PPR-9087", exact=True).click()
    page.click("a.curate-link")
    expect(page.locator("#entity-summary .entity-kind")).to_have_text("code")
    expect(page.locator("#relations tr").filter(has_text="Skyline Home").locator("td.relation")).to_have_text("made_by")
    screenshot(page, "graph-entity-curate")

    page.goto(f"{graph_page}&q=skyline+homes")
    page.get_by_role("link", name="Skyline Homes", exact=True).click()
    page.click("a.curate-link")
    page.fill("#id_into", "Skyline Home")
    page.click("#merge-form input[type=submit]")
    expect(page.locator(".messagelist")).to_contain_text("was merged into Skyline Home")
    version = kb.active_version
    assert GraphEntity.objects.get(kb_version=version, name="skyline home").chunk_count == 2

    Ingester(kb).ingest([replace(source, force=True) for source in discover_files([folder])])
    assert not GraphEntity.objects.filter(kb_version=version, name="skyline homes").exists()
    assert GraphEntity.objects.get(kb_version=version, name="skyline home").chunk_count == 2
