"""The console's retrieval testing and compare pages through Django's test client, on the real search."""

from __future__ import annotations

import json
import re
from html import unescape

import pytest
from django.contrib.auth.models import Permission, User

from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base
from knowledge.versions import activate_version, fill_version, start_version_build, version_build_files
from retrieval.models import RetrievalRun
from retrieval.search_console import dense_language_note
from retrieval.types import SearchResponse
from tenants.models import Tenant
from tests.factories import ChunkFactory, KnowledgeBaseFactory, TenantFactory

pytestmark = pytest.mark.django_db

TESTING = "/admin/retrieval/retrievalrun/"
COMPARE = "/admin/retrieval/retrievalrun/compare/"
ORDER_QUERY = "帮我查下订单 ORD-2026-000817 的进度"


def form(tenant, query: str, **overrides) -> dict:
    """The testing form as a browser submits it: defaults, the synonyms box ticked."""
    return {"tenant": tenant.pk, "query": query, "mode": "hybrid", "top_k": 5, "max_expansions": 3,
            "expand_synonyms": "on", **overrides}  # fmt: skip


@pytest.fixture
def staff_client(client):
    """A staff user who is not a superuser and holds no model permission yet."""
    user = User.objects.create_user("curator", password="pw", is_staff=True)
    client.force_login(user)
    client.user = user
    return client


def test_the_index_links_retrieval_testing(admin_client):
    html = admin_client.get("/admin/").content.decode()
    assert f'<a href="{TESTING}">Retrieval testing</a>' in html


def test_without_a_tenant_to_see_the_pages_say_what_to_do(staff_client):
    KnowledgeBaseFactory()  # a tenant exists, but this user may not see it
    for url in (TESTING, COMPARE):
        page = staff_client.get(url)
        assert page.status_code == 200
        assert "No tenant to search" in page.content.decode()


def test_the_order_query_finds_the_order_status_passage_first_highlighted_with_leg_bars(admin_client, sample_kb):
    page = admin_client.post(TESTING, form(sample_kb.tenant, ORDER_QUERY))
    assert page.status_code == 200
    first = page.context["outcome"]["hits"][0]
    assert first["hit"].source_uri.endswith("troubleshooting/order-status.md")
    assert "<mark>ORD-2026-000817</mark>" in first["passage"]
    html = page.content.decode()
    assert html.count('class="leg leg-bm25"') == len(page.context["outcome"]["hits"])
    assert re.search(r'<span style="width: 100%"></span>', html)  # the best BM25 hit fills its bar
    assert "Timings (ms)" in html and "Candidates" in html
    run = RetrievalRun.objects.get()
    assert run.query == ORDER_QUERY and run.tenant == sample_kb.tenant
    assert run.top_hits[0]["chunk_id"] == first["hit"].chunk_id


def test_a_passage_is_escaped_around_its_marks(admin_client):
    chunk = ChunkFactory(content='<script>alert("x")</script> kettle descaling guide')
    page = admin_client.post(TESTING, form(chunk.tenant, "kettle", mode="vector"))
    html = page.content.decode()
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; <mark>kettle</mark> descaling guide" in html


def test_invalid_filters_are_shown_on_the_form(admin_client):
    tenant = KnowledgeBaseFactory().tenant
    page = admin_client.post(TESTING, form(tenant, "kettle", filters="{not json"))
    assert page.status_code == 200
    assert "not valid JSON" in str(page.context["form"].errors["filters"])
    page = admin_client.post(TESTING, form(tenant, "kettle", filters=json.dumps({"colour": "red"})))
    assert "colour" in str(page.context["form"].errors["filters"])
    assert page.context["outcome"] is None and not RetrievalRun.objects.exists()


def test_a_kb_of_another_tenant_is_refused(admin_client):
    mine, theirs = KnowledgeBaseFactory(), KnowledgeBaseFactory()
    page = admin_client.post(TESTING, form(mine.tenant, "kettle", knowledge_bases=[theirs.pk]))
    assert f"not knowledge bases of {mine.tenant.name}" in str(page.context["form"].errors["knowledge_bases"])


def test_staff_see_tenants_only_with_the_view_tenant_permission(staff_client):
    KnowledgeBaseFactory()
    assert staff_client.get(TESTING).context["has_tenants"] is False
    staff_client.user.user_permissions.add(Permission.objects.get(codename="view_tenant"))
    page = staff_client.get(TESTING)
    assert page.context["has_tenants"] is True
    assert list(page.context["form"].fields["tenant"].queryset) == list(Tenant.objects.order_by("name"))


def test_a_run_is_rerun_with_one_click_and_only_by_its_user(admin_client, staff_client):
    chunk = ChunkFactory(content="the kettle warranty lasts two years")
    admin_client.post(TESTING, form(chunk.tenant, "warranty", mode="vector"))
    run = RetrievalRun.objects.get()
    page = admin_client.post(TESTING, {"rerun": run.pk})
    assert page.status_code == 200
    assert page.context["form"].cleaned_data["query"] == "warranty"
    assert [row["hit"].chunk_id for row in page.context["outcome"]["hits"]] == [chunk.pk]
    assert RetrievalRun.objects.count() == 2
    assert staff_client.post(TESTING, {"rerun": run.pk}).status_code == 404
    assert admin_client.post(TESTING, {"rerun": "1 OR 1=1"}).status_code == 404


def test_curation_links_prefill_a_protected_term_and_a_synonym(admin_client, sample_kb):
    page = admin_client.post(TESTING, form(sample_kb.tenant, ORDER_QUERY))
    links = {item["term"]: item for item in page.context["outcome"]["curation"]}
    assert "ORD-2026-000817" in links
    protect = admin_client.get(links["ORD-2026-000817"]["protect"])
    assert protect.context["adminform"].form.initial == {"tenant": str(sample_kb.tenant.pk), "value": "ORD-2026-000817"}
    synonym = admin_client.get(links["订单"]["synonym"])
    assert synonym.context["adminform"].form.initial["terms"] == "订单"


def test_compare_shows_the_errors_of_both_settings(admin_client):
    tenant = KnowledgeBaseFactory().tenant
    page = admin_client.post(COMPARE, {**form(tenant, "kettle", filters="[1]"), "b-mode": "semantic", "b-top_k": 5})
    assert page.status_code == 200 and page.context["sides"] is None
    assert "filters" in page.context["form"].errors and "mode" in page.context["other"].errors


def test_compare_marks_hits_that_moved(admin_client, sample_kb):
    data = {**form(sample_kb.tenant, "How should I store the lithium battery pack?"), "b-mode": "bm25", "b-top_k": 5,
            "b-max_expansions": 3}  # fmt: skip
    page = admin_client.post(COMPARE, data)
    assert page.status_code == 200
    left, right = page.context["sides"]
    assert left["response"].mode == "hybrid" and right["response"].mode == "bm25"
    before = {row["hit"].chunk_id: row["hit"].rank for row in left["hits"]}
    for row in right["hits"]:
        was = before.get(row["hit"].chunk_id)
        expected = "new" if was is None else "=" if was == row["hit"].rank else None
        assert row["moved"] == expected or (expected is None and row["moved"][0] in "↑↓")
    after = {row["hit"].chunk_id for row in right["hits"]}
    assert all((row["moved"] == "dropped") == (row["hit"].chunk_id not in after) for row in left["hits"])


def test_graph_mode_shows_each_hits_path_and_takes_hops(admin_client, sample_kb):
    question = "Which battery pack does the PPR-9087 use?"
    page = admin_client.post(TESTING, form(sample_kb.tenant, question, mode="graph", hops=1, top_k=10))
    assert page.status_code == 200
    hits = page.context["outcome"]["hits"]
    assert hits and all([leg["name"] for leg in row["legs"]] == ["graph"] for row in hits)
    html = page.content.decode()
    assert html.count('class="meta graph-path"') == len(hits)
    paths = [next(leg for leg in row["legs"])["path"] for row in hits]
    assert any(len(path) == 3 for path in paths) and all(len(path) <= 3 for path in paths)  # at most one hop
    one_hop = next(path for path in paths if len(path) == 3)  # entity, relation kind, entity
    assert f"graph path: {one_hop[0]} —{one_hop[1]}→ {one_hop[2]} (1 hop;" in unescape(html)
    zero = admin_client.post(TESTING, form(sample_kb.tenant, question, mode="graph", hops=0, top_k=10))
    assert all(len(row["legs"][0]["path"]) == 1 for row in zero.context["outcome"]["hits"])


def test_the_graph_global_scope_shows_communities_with_summaries_key_entities_and_passages(admin_client, two_levels):
    sample_kb, query = two_levels, "鱼香肉丝 川菜 招牌菜"
    page = admin_client.post(TESTING, form(sample_kb.tenant, query, mode="graph", graph_scope="global", top_k=3))
    assert page.status_code == 200 and page.context.get("outcome") is None
    communities = page.context["communities"]["communities"]
    assert 0 < len(communities) <= 3 and any("鱼香肉丝" in c["summary"] for c in communities)
    html = unescape(page.content.decode())
    assert html.count('<li class="hit community"') == len(communities)
    for community in communities:
        assert f"key entities: {', '.join(community['key_entities'])}" in html and community["summary"] in html
        assert all(chunk["content"] in html for chunk in community["chunks"]) and community["chunks"]
    below = admin_client.post(TESTING, form(sample_kb.tenant, query, mode="graph", graph_scope="global", level=1))
    assert {c["level"] for c in below.context["communities"]["communities"]} == {1}


def test_the_global_scope_needs_graph_mode(admin_client, sample_kb):
    page = admin_client.post(TESTING, form(sample_kb.tenant, "鱼香肉丝", mode="hybrid", graph_scope="global"))
    assert page.context["form"].errors["graph_scope"] == ["the global scope is a graph search: choose mode graph"]
    assert page.context.get("communities") is None and page.context["outcome"] is None


# --- the dense leg and the query's language ------------------------------------------------------


def test_the_dense_leg_row_matches_the_notices_code_not_the_notes_wording():
    def answer(notes, notices) -> SearchResponse:
        return SearchResponse([], "hybrid", [], {}, False, [], notes, {}, {}, notices=notices)

    reworded = {"stage": "vector", "code": "dense_skipped_language", "message": "no dense leg for 'zh' queries"}
    assert dense_language_note(answer([reworded["message"]], [reworded])) == "no dense leg for 'zh' queries"
    weighted = {**reworded, "code": "dense_weighted_language", "message": "dense retrieval weighted 0.25: ..."}
    assert dense_language_note(answer([weighted["message"]], [weighted])) == weighted["message"]
    assert dense_language_note(answer(["dense retrieval skipped: a note without its notice"], [])) is None


MULTILINGUAL = "remote:bge-m3"  # served over a real socket by the fake embeddings server (tests.peers)


@pytest.fixture
def multilingual_model(settings, embedding_server):
    """A remote model named like a multilingual one (the fake server answers with the local model's
    vectors: what is proved is that the dense leg runs, not what it finds)."""
    from engines import embedders

    settings.EMBEDDING_URL = embedding_server.url
    settings.EMBEDDING_TIMEOUT_S = 5.0
    yield embedders.get_embedder(MULTILINGUAL)
    embedders._embedders.pop(MULTILINGUAL, None)


def test_a_chinese_query_skips_an_english_models_dense_leg_until_a_multilingual_version_is_active(
    admin_client, tmp_path, embedding_server, multilingual_model, django_capture_on_commit_callbacks
):
    kb = create_knowledge_base(tenant=TenantFactory(), name="shop")  # the bundled English-only model
    (tmp_path / "refunds.txt").write_text(
        "退款在五个工作日内到账。Refunds reach your account within five working days."
    )
    Ingester(kb, keep_originals=True).ingest(discover_files([tmp_path]))
    query = "钱多久能退回来"  # a paraphrase: no word of the passage

    def test_page() -> tuple[dict, str]:
        embedding_server.requests.clear()
        page = admin_client.post(TESTING, form(kb.tenant, query, knowledge_bases=[kb.pk]))
        return page.context["outcome"], page.content.decode()

    outcome, html = test_page()
    assert outcome["response"].weights["vector"] == 0.0
    assert outcome["dense_language"] == (
        "dense retrieval skipped: the query is in 'zh', which the embedding model (all-MiniLM-L6-v2) does not cover"
    )
    assert 'class="errornote dense-language"' in html and "docs/multilingual.md" in html

    # Blue-green: a version with a multilingual remote model, its languages naming zh, builds beside the
    # active one (which keeps answering) and answers once it is switched to.
    with django_capture_on_commit_callbacks(execute=False):  # built in-process below, not by a worker
        version, _ = start_version_build(kb, activate=False, embedding_model=MULTILINGUAL, languages=["zh", "en"])
    fill_version(version, version_build_files(version), on_progress=lambda done: None)
    assert (version.status, version.embedding_model, version.languages) == ("ready", MULTILINGUAL, ["zh", "en"])
    assert test_page()[0]["dense_language"] is not None
    activate_version(version)

    outcome, html = test_page()
    response = outcome["response"]
    assert response.weights["vector"] > 0 and outcome["dense_language"] is None and response.notices == []
    assert [request.json()["input"] for request in embedding_server.requests] == [[query]]  # embedded remotely
    assert any("vector" in hit.retrievers for hit in response.results)
    assert "dense-language" not in html


def test_a_parent_child_hit_shows_its_parent_passage_and_matched_children(admin_client, tenant, embedder, tmp_path):
    from tests.retrieval.services.test_parents import PAIRING

    kb = create_knowledge_base(
        tenant=tenant, name="pc", chunking="parent_child", chunk_size=24, chunk_overlap=0, parent_chunk_size=120
    )
    (tmp_path / "hub.txt").write_text(PAIRING)
    Ingester(kb).ingest(discover_files([tmp_path]))
    page = admin_client.post(TESTING, form(tenant, "Zigbee pairing button", knowledge_bases=[kb.pk]))
    first = page.context["outcome"]["hits"][0]["hit"]
    html = page.content.decode()
    assert first.parent_id is not None and len(first.children) >= 2
    assert f"parent passage {first.parent_id}; matched children:" in html
    for child in first.children:
        assert f'<span class="child" data-chunk-id="{child["chunk_id"]}">#{child["ordinal"]} (' in html
    assert "until the ring blinks blue" in unescape(html)  # the parent passage


def test_the_curate_links_and_highlights_skip_function_words_letters_and_small_numbers(sample_kb):
    """Issue 51: "+ synonym / + protected term" were offered for "How", "I" and "1", and "I" was marked in hits."""
    from knowledge.selectors.search import analyzer_for_tenant
    from retrieval.highlight import highlight, meaningful_terms
    from retrieval.search_console import curation_links

    query = "How do I reset the PPR-9087 lock in 1 minute?"
    offered = [link["term"] for link in curation_links(sample_kb.tenant, query)]
    assert offered == ["reset", "PPR-9087", "lock", "minute"]
    analyzer = analyzer_for_tenant(sample_kb.tenant.pk)
    tokens = {token for term in meaningful_terms(analyzer, query) for token in term.tokens}
    marked = str(highlight(analyzer, "I can reset it: I hold the lock for 1 second.", tokens))
    assert "<mark>I</mark>" not in marked and "<mark>1</mark>" not in marked
    assert "<mark>reset</mark>" in marked and "<mark>lock</mark>" in marked


def test_the_knowledge_bases_offered_are_the_chosen_tenants(admin_client, sample_kb):
    """Issue 51: the testing page listed every tenant's KBs whatever tenant was chosen."""
    other = KnowledgeBaseFactory(name="someone-elses")
    for tenant, shown, hidden in ((sample_kb.tenant, sample_kb, other), (other.tenant, other, sample_kb)):
        page = admin_client.get(TESTING, {"tenant": tenant.pk}).content.decode()
        assert f'value="{shown.pk}"' in page and f"/ {shown.name}<" in page
        assert f"/ {hidden.name}<" not in page
    assert "select#id_tenant" in admin_client.get(TESTING).content.decode()  # choosing another hides the boxes
