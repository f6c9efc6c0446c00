"""The BM25 leg (retrieval.services.bm25_leg): exact identifiers, filters inside or beyond the chunk
ids, orphan index entries, stale dictionaries, and RM3 feedback."""

import json
from pathlib import Path

import factory
import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext

from engines import get_lexical_index
from engines.base import LexicalDocument
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base, update_search_settings
from knowledge.lexical import rebuild_lexical_index
from knowledge.models import Chunk, DictionaryTerm
from knowledge.selectors.search import analyzer_for_tenant
from retrieval.filters import compile_filters
from tests.factories import ChunkFactory, DocumentFactory, KnowledgeBaseFactory
from tests.retrieval.services.conftest import names, run

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def test_identifier_queries_find_the_exact_chunk(sample_kb):
    response = run(sample_kb, "PPR-9087 installation", mode="bm25", top_k=5)
    assert all("PPR-9087" in hit.content for hit in response.results[:3])
    assert "ppr-9087-installation-manual.pdf" in names(response)
    response = run(sample_kb, "帮我查下订单 ORD-2026-000817 的进度", mode="bm25", top_k=3)
    assert names(response)[0] == "order-status.md"
    hit = response.results[0]
    assert "ORD-2026-000817" in hit.content
    assert hit.source == "bm25" and hit.retrievers["bm25"]["rank"] == 1
    assert hit.score == hit.retrievers["bm25"]["score"] > 0  # a single list shows its raw BM25 score


def test_bm25_never_calls_the_embedder(sample_kb):
    response = run(sample_kb, "Wi-Fi pairing error E-104", mode="bm25")
    assert names(response)[0] == "wifi-pairing.md"
    assert "embed" not in response.timings_ms and "vector" not in response.candidates


@pytest.fixture
def shops(lexical_index_dir):
    """Two tenants of 400 chunks each: a shop of 25 and a tag of 2 per chunk in its metadata and tags."""
    words = ["warranty", "months", "repair", "battery", "screen", "refund", "shipping", "invoice"]
    tenants = []
    for _ in range(2):
        kb = KnowledgeBaseFactory()
        document = DocumentFactory(knowledge_base=kb)
        ChunkFactory.create_batch(
            400,
            document=document,
            content=factory.Iterator(
                [f"warranty {' '.join(words[: 1 + i % 8])} {'months ' * (i % 5)}item {i}" for i in range(400)]
            ),
            metadata=factory.Iterator([{"shop": i % 25} for i in range(400)]),
            tags=factory.Iterator([["odd" if i % 2 else "even"] for i in range(400)]),
        )
        rebuild_lexical_index(kb.active_version)
        tenants.append(kb.tenant)
    return tenants


def test_filtered_bm25_without_the_ids_finds_the_hits_it_finds_inside_them(settings, shops):
    """A filter matching more chunks than LEXICAL_FILTER_MAX_IDS on an index without the business
    fields: BM25 searches without their ids and goes deeper while too few of its hits pass (here 1 in
    25, so its first 10x over-fetch finds about 4 of the 10 asked): the same hits and scores as
    searching inside the ids, none of another tenant's."""
    _without_filter_fields(shops[0])
    request = {"mode": "bm25", "top_k": 10, "candidates": 10, "filters": {"metadata.shop": 3}}
    settings.SEARCH_CACHE_TTL_S = 0
    settings.LEXICAL_FILTER_MAX_IDS = 1000  # 16 ids match: BM25 searches inside them
    inside = run(shops[0], "warranty months", **request)
    settings.LEXICAL_FILTER_MAX_IDS = 5  # too many: BM25 searches without them
    deeper = run(shops[0], "warranty months", **request)
    assert len(inside.results) == 10
    hits = [(hit.chunk_id, hit.score) for hit in inside.results]
    assert [(hit.chunk_id, hit.score) for hit in deeper.results] == hits
    own = set(Chunk.objects.filter(tenant=shops[0], metadata__shop=3).values_list("pk", flat=True))
    assert {hit.chunk_id for hit in deeper.results} <= own


@pytest.mark.parametrize(
    "filters",
    [
        {"metadata.shop": 3},
        {"metadata.shop": {"in": [3, 4]}, "not": {"tags": "odd"}},
        {"or": [{"metadata.shop": 5}, {"tags": {"all": ["odd", "x"]}}]},
        {"metadata.shop": {"gte": 20}, "tags": "odd"},  # the range is SQL's: the index filters by the tag
    ],
)
def test_filtered_bm25_inside_the_index_finds_what_a_search_inside_the_ids_finds(settings, shops, filters):
    """The keyword index filters by the business fields it holds: no chunk id is read from PostgreSQL
    and the hits and scores are those of a search inside the ids SQL says match."""
    settings.SEARCH_CACHE_TTL_S, settings.LEXICAL_FILTER_MAX_IDS = 0, 777
    tenant = shops[0]
    with CaptureQueriesContext(connection) as queries:
        response = run(tenant, "warranty months", mode="bm25", top_k=10, candidates=10, filters=filters)
    assert not any("LIMIT 778" in query["sql"] for query in queries.captured_queries)
    version = Chunk.objects.filter(tenant=tenant).values_list("kb_version_id", flat=True).first()
    allowed = list(compile_filters(filters).apply(Chunk.objects.filter(tenant=tenant)).values_list("pk", flat=True))
    tokens = analyzer_for_tenant(tenant.pk).tokens("warranty months")
    inside = get_lexical_index().search(version, tenant.pk, tokens, len(allowed), allowed)
    assert len(response.results) == 10
    # The same scores, best first; chunks of equal text tie, and ties may come in another order.
    assert [hit.score for hit in response.results] == pytest.approx([hit.score for hit in inside[:10]], abs=1e-6)
    score_of = {hit.chunk_id: hit.score for hit in inside}
    assert all(hit.score == pytest.approx(score_of[hit.chunk_id], abs=1e-6) for hit in response.results)


def test_an_index_without_the_business_fields_is_searched_inside_the_ids(settings, shops):
    settings.SEARCH_CACHE_TTL_S, settings.LEXICAL_FILTER_MAX_IDS = 0, 777
    _without_filter_fields(shops[0])
    with CaptureQueriesContext(connection) as queries:
        response = run(shops[0], "warranty months", mode="bm25", top_k=10, filters={"metadata.shop": 3})
    assert any("LIMIT 778" in query["sql"] for query in queries.captured_queries)
    assert len(response.results) == 10 and not response.degraded


def _without_filter_fields(tenant) -> None:
    """The tenant's keyword index as one built before the business fields says it is (its state)."""
    version = Chunk.objects.filter(tenant=tenant).values_list("kb_version_id", flat=True).first()
    folder = Path(settings.LEXICAL_INDEX_DIR) / f"kbv-{version}"
    state = folder / (folder / "CURRENT").read_text().strip() / "analyzer.json"
    state.write_text(
        json.dumps({key: value for key, value in json.loads(state.read_text()).items() if key != "filters"})
    )


def test_an_orphan_keyword_entry_never_takes_a_real_chunks_place(tenant, embedder, tmp_path):
    """An index entry for a chunk the database no longer holds (a crash between the commit and the
    index write) is dropped and BM25 goes deeper, so the real chunk still fills the only slot."""
    kb = create_knowledge_base(tenant=tenant, name="docs")
    (tmp_path / "note.txt").write_text("The zeppelin departs at dawn.")
    Ingester(kb).ingest(discover_files([tmp_path]))
    orphan = LexicalDocument(chunk_id=10**12, doc_id=10**12, tenant_id=tenant.pk, text="zeppelin zeppelin zeppelin")
    state = {"analyzer_version": "", "dictionary_fingerprint": ""}
    get_lexical_index().write(kb.active_version.pk, [orphan], **state)
    assert get_lexical_index().search(kb.active_version.pk, tenant.pk, ["zeppelin"], 1, None)[0].chunk_id == 10**12
    response = run(kb, "zeppelin", mode="bm25", top_k=1, candidates=1)
    assert names(response) == ["note.txt"]
    assert response.candidates["bm25"] == 1


def test_protected_terms_need_a_rebuild_and_say_so(tenant, embedder, tmp_path):
    kb = create_knowledge_base(tenant=tenant, name="menu")
    (tmp_path / "menu.txt").write_text("招牌菜：鱼香肉丝，酸甜微辣。\n\n另有宫保鸡丁。")
    Ingester(kb).ingest(discover_files([tmp_path]))
    DictionaryTerm.objects.create(tenant=tenant, kind=DictionaryTerm.Kind.TERM, value="鱼香肉丝")
    stale = run(kb, "鱼香肉丝", mode="bm25")
    assert any("rebuild_lexical_index" in note for note in stale.notes)
    assert rebuild_lexical_index(kb.active_version) == kb.active_version.chunks.count() > 0
    fresh = run(kb, "鱼香肉丝", mode="bm25")
    assert fresh.notes == []
    assert "鱼香肉丝" in fresh.results[0].content


@pytest.fixture
def descaling(tenant, embedder, tmp_path):
    """A note that answers "kettle descaling" in other words than the query's, and one that names both."""
    kb = create_knowledge_base(tenant=tenant, name="descaling")
    notes = {
        "kettle.txt": "Kettle descaling: citric acid dissolves limescale; kettle limescale needs citric acid monthly.",
        "limescale.txt": "Limescale deposits dissolve in citric acid within an hour.",
        "garden.txt": "Water the tomato seedlings every morning.",
    }
    for name, text in notes.items():
        (tmp_path / name).write_text(text)
    Ingester(kb).ingest(discover_files([tmp_path]))
    return kb


def test_feedback_reaches_a_passage_in_the_words_of_the_top_passages(descaling):
    plain = run(descaling, "kettle descaling", mode="bm25", top_k=5)
    assert names(plain) == ["kettle.txt"]  # the other note shares no word with the query
    fed = run(descaling, "kettle descaling", mode="bm25", top_k=5, feedback_docs=1, feedback_terms=5)
    assert names(fed) == ["kettle.txt", "limescale.txt"]
    assert {hit.retrievers["bm25"]["query"] for hit in fed.results} == {"kettle descaling"}
    assert all(0 < hit.relevance <= 1 for hit in fed.results) and not fed.degraded
    assert "feedback" in fed.timings_ms and "feedback" not in plain.timings_ms
    # The original query's whole weight: the first pass again.
    same = run(descaling, "kettle descaling", mode="bm25", top_k=5, feedback_docs=1, feedback_query_weight=1.0)
    assert [hit.chunk_id for hit in same.results] == [hit.chunk_id for hit in plain.results]


def test_a_kbs_feedback_setting_applies_unless_the_request_turns_it_off(descaling):
    update_search_settings(descaling, {"feedback_docs": 1, "feedback_terms": 5})
    assert "limescale.txt" in names(run(descaling, "kettle descaling", mode="bm25", top_k=5))
    assert names(run(descaling, "kettle descaling", mode="bm25", top_k=5, feedback_docs=0)) == ["kettle.txt"]


def test_a_failing_feedback_pass_keeps_the_first_pass_and_says_so(descaling, monkeypatch):
    def broken(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr("retrieval.services.bm25_leg.feedback_query", broken)
    response = run(descaling, "kettle descaling", mode="bm25", top_k=5, feedback_docs=1)
    assert names(response) == ["kettle.txt"]
    assert [(d["stage"], d["cause"]) for d in response.degraded] == [("feedback", "internal_error")]
