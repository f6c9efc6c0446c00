"""The console's chunk editor in Chromium: a curator edits a chunk's text, and the retrieval-testing
page then finds the new text and no longer finds the old; disabling and adding work the same way."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base
from knowledge.models import ChunkEdit, Document
from tenants.services import create_tenant

pytestmark = pytest.mark.slow
PASSWORD = "chunk-editor-password"


@pytest.fixture
def manual_kb(live_server, embedder, tmp_path):
    folder = tmp_path / "docs"  # not tmp_path itself: the screenshots land there, and PNGs are documents too
    folder.mkdir()
    (folder / "lock.txt").write_text("The PortaLock Pro lock PPR-9087 fits doors 35 to 80 mm thick.")
    (folder / "returns.txt").write_text("Returns are accepted within thirty days of delivery.")
    kb = create_knowledge_base(tenant=create_tenant("shop"), name="manuals")
    Ingester(kb).ingest(discover_files([folder]))
    return kb


def search(page, live_server, kb, query: str) -> list[str]:
    page.goto(f"{live_server.url}/admin/retrieval/retrievalrun/")
    if page.locator("select[name=tenant]").count():
        page.select_option("select[name=tenant]", str(kb.tenant.pk))
    page.fill("input[name=query]", query)
    page.click("input[value=Search]")
    page.wait_for_load_state()
    return page.locator("li.hit .passage").all_inner_texts()


def test_a_curator_edits_disables_and_adds_chunks_and_search_follows(page, live_server, manual_kb, screenshot):
    User.objects.create_superuser("curator", password=PASSWORD)
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "curator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#site-name")
    assert any("PPR-9087" in text for text in search(page, live_server, manual_kb, "PPR-9087"))

    lock = Document.objects.get(knowledge_base=manual_kb, source_uri__endswith="lock.txt")
    hit_chunk = page.locator("li.hit").first.get_attribute("data-chunk-id")
    page.locator("li.hit").first.locator("a.open-document").click()  # retrieval testing opens the document at the hit
    expect(page.locator(f"li#chunk-{hit_chunk}")).to_contain_text("PPR-9087")
    assert page.url.endswith(f"/admin/knowledge/chunkedit/document/{lock.pk}/#chunk-{hit_chunk}")
    page.goto(f"{live_server.url}/admin/knowledge/knowledgebase/{manual_kb.pk}/lifecycle/")
    page.locator("tr.document").filter(has_text="lock.txt").locator("a.chunks-link").click()
    chunk = page.locator("li.chunk").first
    chunk.locator("textarea").fill("The PortaLock Max lock PPR-9100 fits any door.")
    chunk.locator("input[value=Save]").click()
    expect(page.locator(".messagelist")).to_contain_text("saved; every index has it now")
    expect(page.locator("li.chunk").first).to_contain_text("edited by user curator")
    screenshot(page, "chunk-editor")

    assert any("PPR-9100" in text for text in search(page, live_server, manual_kb, "PPR-9100"))
    assert not any("PPR-9087" in text for text in search(page, live_server, manual_kb, "PPR-9087"))

    returns = Document.objects.get(knowledge_base=manual_kb, source_uri__endswith="returns.txt")
    page.goto(f"{live_server.url}/admin/knowledge/chunkedit/document/{returns.pk}/")
    page.locator("li.chunk").first.locator("input[name=enabled]").uncheck()
    page.locator("li.chunk").first.locator("input[value=Save]").click()
    expect(page.locator("li.chunk.disabled")).to_have_count(1)
    page.fill("#add-chunk textarea", "Gift cards never expire.")
    page.click("input[value='Add chunk']")
    expect(page.locator("li.chunk")).to_have_count(2)
    assert not any("thirty days" in text for text in search(page, live_server, manual_kb, "returns thirty days"))
    assert any("Gift cards" in text for text in search(page, live_server, manual_kb, "gift cards"))
    assert {edit.edited_by for edit in ChunkEdit.objects.filter(document__in=[lock, returns])} == {"user curator"}
