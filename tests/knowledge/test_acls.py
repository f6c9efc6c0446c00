"""Who may read what (knowledge.acls, docs/permissions.md): ACLs set by an upload's labels, a sidecar, a
folder ACL file, a source or the KB default, written onto every chunk, and kept through a re-ingestion,
a version rebuild and a rollback."""

import json

import pytest

from knowledge.acls import set_default_acl, set_document_acl
from knowledge.documents import reingest_documents, update_document_labels
from knowledge.ingestion.files import ParseError, discover_files, labels_from
from knowledge.ingestion.pipeline import Ingester
from knowledge.ingestion.stored import ingest_stored_files
from knowledge.models import Chunk, Document, KnowledgeBaseVersion
from knowledge.versions import activate_version, fill_version, start_version_build, version_build_files
from retrieval.services.search import search
from retrieval.types import SearchRequest

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def _chunk_acls(document: Document) -> dict[int, set[tuple[str, ...]]]:
    """Version id -> the distinct ACLs of the document's chunks there."""
    acls: dict[int, set[tuple[str, ...]]] = {}
    for version_id, acl in Chunk.objects.filter(document=document).values_list("kb_version_id", "acl"):
        acls.setdefault(version_id, set()).add(tuple(acl))
    return acls


def _found(kb, principals: tuple[str, ...]) -> set[str]:
    request = SearchRequest(query="lock door", mode="bm25", top_k=20, kb_ids=[kb.pk], reader=principals)
    return {hit.source_uri.rsplit("/", 1)[-1] for hit in search(kb.tenant, request).results}


def test_a_folder_acl_file_applies_below_it_and_a_sidecar_wins(kb, tmp_path):
    root = tmp_path / "handbook"
    (root / "hr" / "pay").mkdir(parents=True)
    (root / "open.txt").write_text("The lock on the front door opens at eight.")
    (root / "hr" / ".acl.json").write_text(json.dumps({"acl": ["group:hr"]}))
    (root / "hr" / "pay" / "bands.txt").write_text("The lock of the payroll door: bands per grade.")
    (root / "hr" / "alice.txt").write_text("The lock of Alice's file door.")
    (root / "hr" / "alice.txt.meta.json").write_text(json.dumps({"acl": ["user:alice"]}))
    Ingester(kb).ingest(discover_files([root]))
    acl_of = {doc.source_uri: doc.acl for doc in Document.objects.filter(knowledge_base=kb)}
    assert acl_of == {
        "handbook/open.txt": [],
        "handbook/hr/pay/bands.txt": ["group:hr"],
        "handbook/hr/alice.txt": ["user:alice"],
    }
    document = Document.objects.get(source_uri="handbook/hr/pay/bands.txt")
    assert _chunk_acls(document) == {kb.active_version_id: {("group:hr",)}}
    assert _found(kb, ("*",)) == {"open.txt"}
    assert _found(kb, ("*", "group:hr")) == {"open.txt", "bands.txt"}
    assert _found(kb, ("*", "user:alice")) == {"open.txt", "alice.txt"}


def test_labels_refuse_what_is_no_principal():
    assert labels_from({"acl": ["user:7", "group:hr", "*"]}).acl == ["user:7", "group:hr", "*"]
    for bad in (["alice"], "user:7", ["user:"], ["user:a b"], ["user:a\n"], [7]):
        with pytest.raises(ParseError, match="acl"):
            labels_from({"acl": bad})


def test_an_acl_change_holds_at_the_next_search_and_through_reingestion_rebuild_and_rollback(
    kb, tmp_path, django_capture_on_commit_callbacks, monkeypatch
):
    from knowledge import tasks

    queued = []
    monkeypatch.setattr(tasks.ingest_documents, "apply_async", lambda args, task_id: queued.append(args))
    (tmp_path / "lock.txt").write_text("The lock fits doors 35 to 80 mm thick.")
    (tmp_path / "door.txt").write_text("The door frame takes any lock of the range.")
    Ingester(kb, keep_originals=True).ingest(discover_files([tmp_path]))
    lock = Document.objects.get(knowledge_base=kb, source_uri__endswith="lock.txt")
    first = kb.active_version
    revision = KnowledgeBaseVersion.objects.get(pk=first.pk).revision
    assert _found(kb, ("*",)) == {"lock.txt", "door.txt"}

    with django_capture_on_commit_callbacks(execute=True):  # the keyword index's entries follow after the commit
        update_document_labels(lock, acl=["group:locksmiths"])  # the API's PATCH
    assert KnowledgeBaseVersion.objects.get(pk=first.pk).revision > revision
    assert _found(kb, ("*",)) == {"door.txt"}
    assert _found(kb, ("*", "group:locksmiths")) == {"lock.txt", "door.txt"}

    # A re-ingestion queued before another ACL change does not undo it.
    with django_capture_on_commit_callbacks(execute=True):
        reingest_documents(kb, [lock])
    ((_, files),) = queued
    with django_capture_on_commit_callbacks(execute=True):
        set_document_acl(lock, ["user:carol"])
    ingest_stored_files(kb, files, on_progress=lambda done: None)
    assert Document.objects.get(pk=lock.pk).acl == ["user:carol"]
    assert set().union(*_chunk_acls(lock).values()) == {("user:carol",)}

    # A rebuild carries it; a change during the build reaches the new version's rows too.
    with django_capture_on_commit_callbacks(execute=False):
        second, _ = start_version_build(kb, activate=False, chunk_size=60)
    build_files = version_build_files(second)
    with django_capture_on_commit_callbacks(execute=True):
        set_document_acl(lock, ["user:dave"])
    fill_version(second, build_files, on_progress=lambda done: None)
    assert second.status == second.Status.READY
    activate_version(second)
    assert _chunk_acls(lock) == {first.pk: {("user:dave",)}, second.pk: {("user:dave",)}}
    assert _found(kb, ("*", "user:dave")) == {"lock.txt", "door.txt"}
    assert _found(kb, ("*", "user:carol")) == {"door.txt"}

    # Changed after the switch, then rolled back: the old version's rows hold the change too.
    with django_capture_on_commit_callbacks(execute=True):
        set_document_acl(lock, [])  # back to the KB's default
        set_default_acl(kb, ["group:staff"])
    activate_version(first)
    assert _chunk_acls(lock) == {first.pk: {("group:staff",)}, second.pk: {("group:staff",)}}
    assert _found(kb, ("*",)) == set()
    assert _found(kb, ("*", "group:staff")) == {"lock.txt", "door.txt"}


def test_a_kb_default_needs_a_principal(kb):
    from tenants.principals import InvalidPrincipals

    with pytest.raises(InvalidPrincipals):
        set_default_acl(kb, [])
    assert kb.default_acl == ["*"]
