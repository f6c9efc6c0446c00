"""A curator's chunk edits through the API: every store follows before the answer (vectors, keyword
index, graph, cached answers), and the edits survive re-ingestion or are flagged for review."""

from __future__ import annotations

import pytest

from knowledge import chunking
from knowledge.models import ChunkEdit, Document, KnowledgeBaseVersion
from tests.conftest import client_for
from tests.factories import TenantFactory
from tests.knowledge.helpers import graph_names, ingest

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

# Three paragraphs, each long enough to be a chunk of its own at the kb fixture's 120 tokens.
PARAGRAPHS = [
    "The PortaLock Pro lock PPR-9087 fits doors 35 to 80 mm thick. " * 6,
    "The AirSense monitor SKY-30452 measures carbon dioxide every minute. " * 6,
    "Returns are accepted within thirty days of delivery with the receipt. " * 6,
]


@pytest.fixture
def manual(kb, tmp_path):
    path = tmp_path / "manual.txt"
    path.write_text("\n\n".join(paragraph.strip() for paragraph in PARAGRAPHS))
    ingest(kb, tmp_path)
    return path


def chunks_url(kb, document) -> str:
    return f"/api/v1/knowledge-bases/{kb.pk}/documents/{document.pk}/chunks"


def found(client, kb, query: str, mode: str = "bm25") -> list[str]:
    body = {"query": query, "top_k": 5, "kb_ids": [kb.pk]}
    return [hit["content"] for hit in client.post(f"/api/v1/retrieval/{mode}", body, format="json").json()["results"]]


def test_edit_disable_enable_and_add_reach_every_store_at_once(kb, manual):
    curator, searcher = client_for(kb.tenant, "ingest"), client_for(kb.tenant)
    document = Document.objects.get(knowledge_base=kb)
    listed = curator.get(chunks_url(kb, document)).json()["chunks"]
    assert [chunk["ordinal"] for chunk in listed] == [0, 1, 2] and "PPR-9087" in listed[0]["content"]
    assert any("PPR-9087" in text for text in found(searcher, kb, "PPR-9087"))  # cached now, if caching is on
    revision = KnowledgeBaseVersion.objects.get(pk=kb.active_version_id).revision

    lock = listed[0]["id"]
    answer = curator.patch(
        f"{chunks_url(kb, document)}/{lock}",
        {"content": "The PortaLock Max lock PPR-9100 fits any door."},
        format="json",
    )
    assert answer.status_code == 200, answer.content
    edited = answer.json()["chunks"][0]
    assert (edited["id"], edited["edited"], edited["enabled"]) == (lock, True, True)
    assert edited["original_content"].startswith("The PortaLock Pro lock PPR-9087")
    assert edited["edited_by"].startswith("api key")
    assert KnowledgeBaseVersion.objects.get(pk=kb.active_version_id).revision > revision
    assert not any("PPR-9087" in text for text in found(searcher, kb, "PPR-9087"))
    assert found(searcher, kb, "PPR-9100")[0].startswith("The PortaLock Max")
    assert found(searcher, kb, "which lock fits any door", mode="vector")[0].startswith("The PortaLock Max")
    names = graph_names(kb)
    assert "ppr-9100" in names and "ppr-9087" not in names

    monitor = listed[1]["id"]
    assert curator.patch(f"{chunks_url(kb, document)}/{monitor}", {"enabled": False}, format="json").status_code == 200
    assert not any("SKY-30452" in text for text in found(searcher, kb, "SKY-30452"))
    disabled = curator.get(chunks_url(kb, document)).json()["chunks"][1]
    assert (disabled["id"], disabled["enabled"]) == (monitor, False)
    assert curator.patch(f"{chunks_url(kb, document)}/{monitor}", {"enabled": True}, format="json").status_code == 200
    assert any("SKY-30452" in text for text in found(searcher, kb, "SKY-30452"))

    added = curator.post(chunks_url(kb, document), {"content": "Gift cards never expire."}, format="json")
    assert added.status_code == 201, added.content
    assert added.json()["chunks"][-1]["manual"] is True
    assert found(searcher, kb, "gift cards") == ["Gift cards never expire."]
    assert Document.objects.get(pk=document.pk).chunk_count == 4


def test_edits_survive_a_rechunk_and_a_changed_file_flags_them_for_review(kb, manual, monkeypatch, admin_client):
    curator, searcher = client_for(kb.tenant, "ingest"), client_for(kb.tenant)
    document = Document.objects.get(knowledge_base=kb)
    lock, monitor, _ = (chunk["id"] for chunk in curator.get(chunks_url(kb, document)).json()["chunks"])
    curator.patch(f"{chunks_url(kb, document)}/{lock}", {"content": "Lock PPR-9100 fits any door."}, format="json")
    curator.patch(f"{chunks_url(kb, document)}/{monitor}", {"enabled": False}, format="json")
    curator.post(chunks_url(kb, document), {"content": "Gift cards never expire."}, format="json")

    monkeypatch.setattr(chunking, "CHUNKER_VERSION", "next")  # the same file cut again
    monkeypatch.setattr(chunking, "UNCHANGED_SINCE", {})
    assert ingest(kb, manual.parent).replaced == 1
    chunks = curator.get(chunks_url(kb, document)).json()
    assert [(chunk["content"][:20], chunk["enabled"]) for chunk in chunks["chunks"]] == [
        ("Lock PPR-9100 fits a", True), ("The AirSense monitor", False), ("Returns are accepted", True),
        ("Gift cards never exp", True),
    ]  # fmt: skip
    assert chunks["needs_review"] == []
    for code in ("PPR-9087", "SKY-30452"):  # the edited text, the disabled chunk: neither is searched
        assert not any(code in text for text in found(searcher, kb, code))
    lock_now = chunks["chunks"][0]["id"]
    again = curator.patch(f"{chunks_url(kb, document)}/{lock_now}", {"content": "Lock PPR-9200."}, format="json")
    assert again.json()["chunks"][0]["original_content"].startswith("The PortaLock Pro")  # still the file's text

    manual.write_text("\n\n".join(p.strip() for p in [PARAGRAPHS[0].replace("35", "30"), *PARAGRAPHS[1:]]))
    ingest(kb, manual.parent)
    chunks = curator.get(chunks_url(kb, document)).json()
    (review,) = chunks["needs_review"]
    assert review["content"] == "Lock PPR-9200." and review["original_content"].startswith("The PortaLock Pro")
    assert chunks["chunks"][0]["content"].startswith("The PortaLock Pro lock PPR-9087 fits doors 30")
    assert [chunk["enabled"] for chunk in chunks["chunks"]] == [True, False, True, True]  # the others still apply
    assert ChunkEdit.objects.filter(document=document, needs_review=True).count() == 1
    # The console's record: who changed what, and what waits for review.
    page = admin_client.get("/admin/knowledge/chunkedit/?needs_review__exact=1")
    assert page.status_code == 200
    assert [edit.pk for edit in page.context["cl"].result_list] == [review_edit.pk for review_edit in
        ChunkEdit.objects.filter(document=document, needs_review=True)]  # fmt: skip
    assert "api key" in page.content.decode()


def test_chunk_requests_are_checked(kb, manual):
    document = Document.objects.get(knowledge_base=kb)
    chunk_id = document.chunks.order_by("ordinal").first().pk
    url = f"{chunks_url(kb, document)}/{chunk_id}"
    assert client_for(kb.tenant).patch(url, {"enabled": False}, format="json").status_code == 403  # search key
    curator = client_for(kb.tenant, "ingest")
    for body, code in (({}, "invalid_chunk_edit"), ({"content": "  "}, "invalid_request"), ({"enabled": "x"}, None)):
        answer = curator.patch(url, body, format="json")
        assert answer.status_code == 400, (body, answer.content)
        assert code is None or answer.json()["error"]["code"] == code
    assert (
        curator.patch(f"{chunks_url(kb, document)}/999999999", {"enabled": False}, format="json").json()["error"][
            "code"
        ]
        == "chunk_not_found"
    )
    other = client_for(TenantFactory(), "ingest")
    assert other.get(chunks_url(kb, document)).status_code == 404  # another tenant's KB answers like a missing one
    assert other.patch(url, {"enabled": False}, format="json").status_code == 404
