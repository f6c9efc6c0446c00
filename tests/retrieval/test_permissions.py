"""Document permissions on every search path (issue 48, docs/permissions.md): the leak matrix.

A corpus of documents with hand-written ACLs, ingested by the real pipeline and model; readers given
by keys (plain, ``act_as`` with a body's principals, bound); every search mode with the result cache on
and off, plain and parent-child chunks, the graph leg on and off, with and without a filter. The
visible set of each reader is written here by hand, never derived from the code under test, and no
answer may hold a hidden document's id, title or words, nor count it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base
from knowledge.models import Chunk
from tenants.services import create_api_key
from tests.conftest import client_with_key
from tests.factories import TenantFactory, give_unlimited_rate_tier

# Each passage shares the words "quokka harbour ledger" (so a keyword search finds them all) and holds a
# secret word of its own that must never reach a reader who may not read it.
DOCS = {
    "public.txt": ("Quokka Harbour ledger for everyone: the canteen opens at noon. Secret word marigold.", None),
    "hr.txt": ("Quokka Harbour ledger of salaries: payroll bands for engineers. Secret word tamarind.", ["group:hr"]),
    "alice.txt": ("Quokka Harbour ledger of Alice: her medical leave notes. Secret word juniper.", ["user:alice"]),
    "shared.txt": (
        "Quokka Harbour ledger shared by HR and Bob: the office lease contract. Secret word saffron.",
        ["group:hr", "user:bob"],
    ),
}
SECRETS = {"public.txt": "marigold", "hr.txt": "tamarind", "alice.txt": "juniper", "shared.txt": "saffron"}
TITLES = {"public.txt": "public", "hr.txt": "hr", "alice.txt": "alice", "shared.txt": "shared"}

# Who sees what, by hand.
VISIBLE = {
    "plain key": {"public.txt"},
    "act as group:hr": {"public.txt", "hr.txt", "shared.txt"},
    "act as user:alice": {"public.txt", "alice.txt"},
    "act as user:alice + group:hr": {"public.txt", "hr.txt", "alice.txt", "shared.txt"},
    "bound to user:bob": {"public.txt", "shared.txt"},
    "bound to user:bob, body says group:hr": {"public.txt", "shared.txt"},
}
QUERY = "quokka harbour ledger"


def _write_corpus(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, (text, acl) in DOCS.items():
        (folder / name).write_text(text, encoding="utf-8")
        if acl is not None:
            (folder / f"{name}.meta.json").write_text(json.dumps({"acl": acl}), encoding="utf-8")
    return folder


@pytest.fixture
def corpus(db, tmp_path):
    """Two KBs of one tenant, plain and parent-child chunks, holding the same documents."""
    return build_corpus(tmp_path)


def build_corpus(tmp_path: Path):
    """The tenant and its two KBs (``corpus``), ingested into whichever engines the settings name."""
    tenant = TenantFactory()
    give_unlimited_rate_tier(tenant)
    kbs = {
        "plain": create_knowledge_base(tenant=tenant, name="plain"),
        "parent_child": create_knowledge_base(
            tenant=tenant, name="pc", chunking="parent_child", chunk_size=24, chunk_overlap=0, parent_chunk_size=120
        ),
    }
    for name, kb in kbs.items():
        report = Ingester(kb).ingest(discover_files([_write_corpus(tmp_path / name)]))
        assert not report.failures, report.failures
    return tenant, kbs


def _readers(tenant) -> dict:
    def client(**fields):
        return client_with_key(create_api_key(tenant=tenant, **fields).raw_key)

    act_as = client(scopes=["search", "act_as"])
    bob = client(principals=["user:bob"])
    return {
        "plain key": (client(), None),
        "act as group:hr": (act_as, ["group:hr"]),
        "act as user:alice": (act_as, ["user:alice"]),
        "act as user:alice + group:hr": (act_as, ["user:alice", "group:hr"]),
        "bound to user:bob": (bob, None),
        "bound to user:bob, body says group:hr": (
            client(principals=["user:bob"], scopes=["search", "act_as"]),
            ["group:hr"],
        ),
    }


def _search(client, body: dict):
    return client.post("/api/v1/retrieval/search", data=json.dumps(body), content_type="application/json")


def _names(results: list[dict]) -> set[str]:
    return {Path(hit["source_uri"]).name for hit in results}


def _assert_nothing_hidden_leaks(raw: bytes, visible: set[str]) -> None:
    text = raw.decode()
    for name in DOCS.keys() - visible:
        assert SECRETS[name] not in text, (name, text[:500])
        assert f'"title":"{TITLES[name]}"' not in text.replace(" ", ""), name
        assert name not in text, name


@pytest.mark.parametrize("cache", ["cache on", "cache off"])
def test_the_leak_matrix(corpus, settings, cache):
    """Every reader x mode x chunking x graph x filter: exactly its visible documents, nothing of others."""
    settings.SEARCH_CACHE_TTL_S = 300 if cache == "cache on" else 0
    assert leak_matrix(corpus) == 6 * 2 * 5 * 3 * 2


def leak_matrix(corpus) -> int:
    """Runs the matrix on ``corpus`` (on the engines the settings name) and returns its cell count."""
    tenant, kbs = corpus
    chunk_ids = {}
    for kb in kbs.values():
        for chunk_id, uri in Chunk.objects.filter(kb_version=kb.active_version).values_list(
            "id", "document__source_uri"
        ):
            chunk_ids.setdefault(Path(uri).name, set()).add(chunk_id)
    doc_ids = {}
    for kb in kbs.values():
        for document in kb.documents.all():
            doc_ids.setdefault(Path(document.source_uri).name, set()).add(document.pk)
    cells = 0
    for reader, (client, principals) in _readers(tenant).items():
        visible = VISIBLE[reader]
        for chunking, kb in kbs.items():
            for mode, graph in (
                ("vector", False),
                ("bm25", False),
                ("hybrid", False),
                ("hybrid", True),
                ("graph", True),
            ):
                for filters in (None, {"doc_type": "txt"}, {"not": {"doc_type": "pdf"}}):
                    body = {"query": QUERY, "mode": mode, "kb_ids": [kb.pk], "top_k": 20}
                    if graph and mode == "hybrid":
                        body["graph"] = True
                    if filters is not None:
                        body["filters"] = filters
                    if principals is not None:
                        body["principals"] = principals
                    for _ in range(2):  # the second answer may come from the cache
                        response = _search(client, body)
                        assert response.status_code == 200, (reader, chunking, mode, response.content)
                        results = response.json()["results"]
                        where = (reader, chunking, mode, graph, filters)
                        assert _names(results) <= visible, where
                        if mode in ("bm25", "hybrid"):  # every visible document holds the query's words
                            assert _names(results) == visible, where
                        returned_ids = {hit["doc_id"] for hit in results}
                        hidden_ids = set().union(*(doc_ids[name] for name in DOCS.keys() - visible))
                        assert not returned_ids & hidden_ids, where
                        _assert_nothing_hidden_leaks(response.content, visible)
                        if mode in ("graph", "hybrid"):  # nor a hidden passage's id, e.g. as a bridge's "via"
                            hidden_chunks = set().union(*(chunk_ids[name] for name in DOCS.keys() - visible))
                            _assert_no_hidden_chunk_id(response.json(), hidden_chunks, where)
                        if mode == "graph":  # the graph leg ran (not a vacuous pass): its entity names them all
                            assert results, where
                        cells += 1
    return cells


def _assert_no_hidden_chunk_id(answer: dict, hidden: set[int], where) -> None:
    for hit in answer["results"]:
        assert hit["chunk_id"] not in hidden, where
        bridge = hit.get("retrievers", {}).get("graph", {}).get("bridge")
        if bridge:
            assert bridge["via"] not in hidden, (where, bridge)


def test_a_reader_sees_the_same_answer_cached_as_fresh_and_never_anothers(corpus, settings):
    """One reader's cached answer never serves another: the principals are part of the cache key."""
    tenant, kbs = corpus
    settings.SEARCH_CACHE_TTL_S = 300
    readers = _readers(tenant)
    hr_client, hr = readers["act as group:hr"]
    body = {"query": QUERY, "mode": "bm25", "kb_ids": [kbs["plain"].pk], "top_k": 20}
    first = _search(hr_client, {**body, "principals": hr})
    assert _names(first.json()["results"]) == VISIBLE["act as group:hr"]
    plain_client, _ = readers["plain key"]
    second = _search(plain_client, body)
    assert second.json()["cached"] is False
    assert _names(second.json()["results"]) == {"public.txt"}
    alice = _search(hr_client, {**body, "principals": ["user:alice"]})
    assert alice.json()["cached"] is False
    assert _names(alice.json()["results"]) == VISIBLE["act as user:alice"]


def test_principals_need_the_act_as_scope(corpus):
    tenant, kbs = corpus
    client = client_with_key(create_api_key(tenant=tenant).raw_key)
    response = _search(client, {"query": QUERY, "principals": ["group:hr"]})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "act_as_not_allowed"
    bad = client_with_key(create_api_key(tenant=tenant, scopes=["search", "act_as"]).raw_key)
    response = _search(bad, {"query": QUERY, "principals": ["hr"]})
    assert response.status_code == 400
    assert "principal" in response.json()["error"]["message"]


def test_global_graph_search_hides_summaries_built_from_unreadable_passages(db, curated_sample_kb):
    """A community summary quotes its supporting passages: one built from a passage the reader may not
    read is not shown, nor counted among the candidates."""
    from knowledge.acls import set_document_acl
    from knowledge.models import Chunk, GraphCommunity, GraphMention

    kb, query = curated_sample_kb, "鱼香肉丝 川菜 招牌菜"
    give_unlimited_rate_tier(kb.tenant)
    plain = client_with_key(create_api_key(tenant=kb.tenant).raw_key)

    def global_search(client, **extra) -> dict:
        body = {"query": query, "scope": "global", "top_k": 50, **extra}
        response = client.post("/api/v1/retrieval/graph", data=json.dumps(body), content_type="application/json")
        assert response.status_code == 200, response.content
        return response.json()

    before = global_search(plain)
    best = GraphCommunity.objects.get(kb_version=kb.active_version, level=0, number=before["communities"][0]["number"])
    secret = Chunk.objects.get(pk=best.chunk_ids[0]).document
    set_document_acl(secret, ["group:chefs"])
    secret_chunks = set(secret.chunks.values_list("pk", flat=True))
    # By hand: the level-0 communities none of whose supporting passages is the restricted document's,
    # and each of whose key entities another passage mentions (a name known only from it is hidden too).
    mentioned = set(GraphMention.objects.exclude(chunk_id__in=secret_chunks).values_list("entity_id", flat=True))
    communities = GraphCommunity.objects.filter(kb_version=kb.active_version, level=0)
    readable = {
        c.number
        for c in communities
        if not secret_chunks & set(c.chunk_ids) and set(c.entity_ids[: len(c.key_entities)]) <= mentioned
    }
    named_only_in_secret = [
        c.number for c in communities if not secret_chunks & set(c.chunk_ids) and c.number not in readable
    ]
    assert named_only_in_secret  # the corpus has a community whose passages pass but whose names do not
    after = global_search(plain)
    assert {c["number"] for c in after["communities"]} <= readable
    assert best.number not in {c["number"] for c in after["communities"]}
    assert after["candidates"] == len(readable)
    assert best.summary not in json.dumps(after, ensure_ascii=False)
    chefs = client_with_key(create_api_key(tenant=kb.tenant, principals=["group:chefs"]).raw_key)
    assert best.number in {c["number"] for c in global_search(chefs)["communities"]}


def test_a_kb_limited_key_meets_other_kbs_as_missing_ones(corpus):
    tenant, kbs = corpus
    limited = client_with_key(create_api_key(tenant=tenant, knowledge_base_ids=[kbs["plain"].pk]).raw_key)
    other = kbs["parent_child"].pk
    missing = 10**12
    for kb_id in (other, missing):
        response = _search(limited, {"query": QUERY, "kb_ids": [kb_id]})
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "knowledge_base_not_found"
        assert response.json()["error"]["message"] == f"unknown knowledge base id(s): {kb_id}"
        assert limited.get(f"/api/v1/knowledge-bases/{kb_id}").status_code == 404
        assert limited.get(f"/api/v1/knowledge-bases/{kb_id}/documents").status_code == 404
    everything = _search(limited, {"query": QUERY, "mode": "bm25", "top_k": 50})
    assert {hit["kb_id"] for hit in everything.json()["results"]} == {kbs["plain"].pk}
    listed = limited.get("/api/v1/knowledge-bases").json()
    assert [kb["id"] for kb in listed["results"]] == [kbs["plain"].pk]
    stats = limited.get("/api/v1/stats").json()
    assert stats["knowledge_bases"] == 1
    assert stats["documents"]["total"] == 1  # a plain key reads the public document alone


def test_listings_show_a_search_key_only_what_its_reader_may_read(corpus):
    tenant, kbs = corpus
    kb = kbs["plain"]
    bob = client_with_key(create_api_key(tenant=tenant, principals=["user:bob"]).raw_key)
    listed = bob.get(f"/api/v1/knowledge-bases/{kb.pk}/documents").json()
    assert {Path(d["name"]).name for d in listed["results"]} == VISIBLE["bound to user:bob"]
    assert bob.get(f"/api/v1/knowledge-bases/{kb.pk}").json()["document_count"] == 2
    (version,) = bob.get(f"/api/v1/knowledge-bases/{kb.pk}/versions").json()["results"]
    assert version["document_count"] == 2
    hidden = kb.documents.get(source_uri__endswith="hr.txt")
    assert bob.get(f"/api/v1/knowledge-bases/{kb.pk}/documents/{hidden.pk}").status_code == 404
    curator = client_with_key(create_api_key(tenant=tenant, scopes=["ingest"]).raw_key)
    assert curator.get(f"/api/v1/knowledge-bases/{kb.pk}").json()["document_count"] == 4
    (version,) = curator.get(f"/api/v1/knowledge-bases/{kb.pk}/versions").json()["results"]
    assert version["document_count"] == 4


def test_dify_reads_as_its_keys_binding_and_meets_other_kbs_as_missing(corpus):
    tenant, kbs = corpus
    kb, other = kbs["plain"], kbs["parent_child"]
    bob = client_with_key(create_api_key(tenant=tenant, principals=["user:bob"], knowledge_base_ids=[kb.pk]).raw_key)

    def dify(kb_id: int):
        body = {"knowledge_id": str(kb_id), "query": QUERY, "retrieval_setting": {"top_k": 20, "score_threshold": 0}}
        return bob.post("/api/v1/dify/retrieval", body, format="json")

    response = dify(kb.pk)
    assert response.status_code == 200, response.content
    records = response.json()["records"]
    assert {record["title"] for record in records} == {TITLES[name] for name in VISIBLE["bound to user:bob"]}
    _assert_nothing_hidden_leaks(response.content, VISIBLE["bound to user:bob"])
    outside, missing = dify(other.pk), dify(10**12)
    assert (outside.status_code, outside.json()["error_code"]) == (404, 2001)
    assert outside.json()["error_msg"].replace(str(other.pk), "N") == missing.json()["error_msg"].replace(
        str(10**12), "N"
    )


def test_console_retrieval_testing_reads_as_the_chosen_reader(corpus, admin_client):
    tenant, kbs = corpus
    kb = kbs["plain"]

    def titles(read_as: str) -> set[str]:
        page = admin_client.post(
            "/admin/retrieval/retrievalrun/",
            {"tenant": tenant.pk, "query": QUERY, "knowledge_bases": [kb.pk], "mode": "bm25", "top_k": 20,
             "max_expansions": 3, "read_as": read_as},
        )  # fmt: skip
        assert page.status_code == 200
        return {hit["hit"].title for hit in page.context["outcome"]["hits"]}

    assert titles("") == {"public"}
    assert titles("group:hr") == {"public", "hr", "shared"}
    page = admin_client.post(
        "/admin/retrieval/retrievalrun/",
        {"tenant": tenant.pk, "query": QUERY, "mode": "bm25", "top_k": 5, "max_expansions": 3, "read_as": "hr"},
    )
    assert "is not a principal" in page.content.decode()


def test_a_kb_limited_key_creates_no_knowledge_base_and_reads_no_task_of_another(corpus):
    from knowledge.models import KnowledgeTask

    tenant, kbs = corpus
    limited = client_with_key(
        create_api_key(tenant=tenant, scopes=["ingest"], knowledge_base_ids=[kbs["plain"].pk]).raw_key
    )
    response = limited.post("/api/v1/knowledge-bases", {"name": "new"}, format="json")
    assert response.status_code == 403, response.content
    assert response.json()["error"]["code"] == "insufficient_scope"
    task = KnowledgeTask.objects.create(
        task_id="0b8f-0def", tenant=tenant, knowledge_base=kbs["parent_child"], kind="ingest"
    )
    other, missing = limited.get(f"/api/v1/tasks/{task.task_id}"), limited.get("/api/v1/tasks/0b8f-aaaa")
    assert other.status_code == missing.status_code == 404
    assert other.json()["error"]["code"] == missing.json()["error"]["code"]
    assert other.json()["error"]["message"] == "unknown task id: 0b8f-0def"


def test_the_semantic_cache_scope_holds_the_reader(db):
    """The semantic cache answers only within a scope: its key's material but the query, readers included."""
    from knowledge.selectors.search import SearchedKnowledge
    from retrieval.cache import _key_material, _scope
    from retrieval.types import SearchRequest

    tenant = TenantFactory()
    knowledge = SearchedKnowledge((), 0)
    scopes = {
        _scope(_key_material(tenant, SearchRequest(query="q", reader=principals), knowledge))
        for principals in (("*",), ("*", "group:hr"), ("*", "user:alice"))
    }
    assert len(scopes) == 3


def test_a_check_that_cannot_run_refuses_the_search(corpus, monkeypatch):
    """Fails closed: the permission check's own failure is a 503 with a code, never an unchecked answer."""
    from django.db import OperationalError

    from retrieval import access

    tenant, kbs = corpus

    def unreachable(versions):
        raise OperationalError("the database went away")

    monkeypatch.setattr(access, "restricted_versions", unreachable)
    client = client_with_key(create_api_key(tenant=tenant).raw_key)
    for mode in ("vector", "bm25", "hybrid", "graph"):
        response = _search(client, {"query": QUERY, "mode": mode, "kb_ids": [kbs["plain"].pk]})
        assert response.status_code == 503, response.content
        assert response.json()["error"]["code"] == "access_check_unavailable"
        _assert_nothing_hidden_leaks(response.content, set())


def test_the_keyword_index_filters_by_acl_itself(corpus):
    """The reader's check inside the keyword index (its entries' ACL terms), not only in the rows' check."""
    from engines import get_lexical_index
    from engines import lexical_filter as lf
    from knowledge.models import Chunk
    from knowledge.selectors.search import analyzer_for_tenant

    tenant, kbs = corpus
    kb = kbs["plain"]
    kb.refresh_from_db()
    index = get_lexical_index()
    assert index.state(kb.active_version_id).acl  # built with ACL terms
    tokens = analyzer_for_tenant(tenant.pk).tokens(QUERY)
    names = dict(Chunk.objects.filter(kb_version=kb.active_version).values_list("id", "document__source_uri"))
    for principals, visible in (
        (("*",), VISIBLE["plain key"]),
        (("*", "group:hr"), VISIBLE["act as group:hr"]),
        (("*", "user:bob"), VISIBLE["bound to user:bob"]),
    ):
        acl = lf.Terms(tuple(lf.acl_term(principal) for principal in principals))
        hits = index.search(kb.active_version_id, tenant.pk, tokens, 50, None, field_filter=acl)
        assert {Path(names[hit.chunk_id]).name for hit in hits} == visible, principals


def test_search_analytics_keep_no_principals(corpus):
    from django.forms.models import model_to_dict

    from retrieval import search_log
    from retrieval.models import SearchLog

    tenant, kbs = corpus
    act_as = client_with_key(create_api_key(tenant=tenant, scopes=["search", "act_as"]).raw_key)
    response = _search(act_as, {"query": QUERY, "mode": "bm25", "principals": ["group:hr", "user:zed"]})
    assert response.status_code == 200
    search_log.flush()
    rows = [model_to_dict(row) for row in SearchLog.objects.filter(tenant=tenant)]
    assert rows
    assert "group:hr" not in repr(rows) and "user:zed" not in repr(rows)


def test_a_url_sources_acl_reaches_its_documents_at_once(corpus, django_capture_on_commit_callbacks):
    from knowledge.models import Chunk, Document
    from knowledge.sources import create_source, update_source

    tenant, kbs = corpus
    kb = kbs["plain"]
    source = create_source(kb, kind="urls", urls=["https://example.org/a"], interval_seconds=3600)
    document = Document.objects.get(knowledge_base=kb, source_uri__endswith="public.txt")
    Document.objects.filter(pk=document.pk).update(source=source)
    with django_capture_on_commit_callbacks(execute=True):
        update_source(source, acl=["group:web"])
    assert Document.objects.get(pk=document.pk).acl == ["group:web"]
    assert {tuple(acl) for acl in Chunk.objects.filter(document=document).values_list("acl", flat=True)} == {
        ("group:web",)
    }
    plain = client_with_key(create_api_key(tenant=tenant).raw_key)
    found = _search(plain, {"query": QUERY, "mode": "bm25", "kb_ids": [kb.pk], "top_k": 20}).json()["results"]
    assert _names(found) == set()


# --- the reads by id beside the searches: document text, chunk list, MCP tools, OpenAI search -------


def test_reads_by_id_show_a_reader_only_what_it_may_read(corpus):
    """A document's text and chunks, an MCP passage or document, an OpenAI-compatible search: a plain
    key (reader ``*``) meets a restricted document as a missing one; a key bound to its reader reads it."""
    from knowledge.errors import DocumentNotFound
    from retrieval import mcp_tools
    from retrieval.errors import PassageNotFound

    tenant, kbs = corpus
    kb = kbs["plain"]
    hr = kb.documents.get(source_uri__endswith="hr.txt")
    public = kb.documents.get(source_uri__endswith="public.txt")
    hr_chunk = hr.chunks.filter(kb_version_id=kb.active_version_id).first()
    plain = create_api_key(tenant=tenant, scopes=["search"])
    member = create_api_key(tenant=tenant, scopes=["search"], principals=["group:hr"])

    for issued, may_read in ((plain, False), (member, True)):
        key, client = issued.api_key, client_with_key(issued.raw_key)
        assert client.get(f"/api/v1/documents/{hr.pk}/text").status_code == (200 if may_read else 404)
        assert client.get(f"/api/v1/documents/{public.pk}/text").status_code == 200
        if may_read:
            assert mcp_tools.get_passage(key, hr_chunk.pk)["chunk_id"] == hr_chunk.pk
            assert mcp_tools.get_document(key, kb.pk, hr.pk)["id"] == hr.pk
        else:
            with pytest.raises(PassageNotFound):
                mcp_tools.get_passage(key, hr_chunk.pk)
            with pytest.raises(DocumentNotFound):
                mcp_tools.get_document(key, kb.pk, hr.pk)
        answer = mcp_tools.search(key, {"query": QUERY, "kb_ids": [kb.pk], "top_k": 10, "mode": "bm25"})
        found = {Path(hit["source_uri"]).name for hit in answer["results"]}
        assert ("hr.txt" in found) is may_read and "public.txt" in found
        page = client.post(
            f"/v1/vector_stores/{kb.pk}/search",
            data=json.dumps({"query": QUERY, "max_num_results": 10}),
            content_type="application/json",
        )
        assert page.status_code == 200, page.content
        names = {Path(item["filename"]).name for item in page.json()["data"]}
        assert ("hr.txt" in names) is may_read and "public.txt" in names
        assert ("tamarind" in page.content.decode()) is may_read


def test_a_kb_limited_key_meets_other_kbs_as_missing_in_mcp_and_openai(corpus):
    from knowledge.errors import KnowledgeBaseNotFound
    from retrieval import mcp_tools

    tenant, kbs = corpus
    issued = create_api_key(tenant=tenant, scopes=["search"], knowledge_base_ids=[kbs["plain"].pk])
    limited, other = issued.api_key, kbs["parent_child"]
    listed = {kb["id"] for kb in mcp_tools.list_knowledge_bases(limited)["knowledge_bases"]}
    assert listed == {kbs["plain"].pk}
    with pytest.raises(KnowledgeBaseNotFound):
        mcp_tools.get_document(limited, other.pk, other.documents.first().pk)
    client = client_with_key(issued.raw_key)
    assert {store["id"] for store in client.get("/v1/vector_stores").json()["data"]} == {str(kbs["plain"].pk)}
    assert client.get(f"/v1/vector_stores/{other.pk}").status_code == 404
