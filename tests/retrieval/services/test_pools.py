"""A leg's query variants searched beside each other (retrieval.services.pools.per_variant): the same
answer as one after another, each variant's search waiting for the others' to have started (so
they overlap), results in the variants' order whatever order they finish in, and a deadline."""

from __future__ import annotations

import threading

import pytest
from django.db import transaction

from engines.errors import ComponentError
from engines.pgvector_index import PgVectorIndex
from engines.tantivy_index import TantivyLexicalIndex
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base
from knowledge.models import Synonym
from retrieval import selectors
from retrieval.expansion import ExpansionOptions
from retrieval.services.pools import per_variant
from tests.concurrency import RACE_TIMEOUT_S, meet_before
from tests.retrieval.services.conftest import run
from tests.retrieval.test_expansion import ChatServer

QUERY = "how hot may the charger get"
SYNONYMS = ExpansionOptions(synonyms=True, llm=False)
PASSAGES = {
    "charger.txt": "The charger gets warm while charging; above 60 degrees unplug it.",
    "battery.txt": "Keep the lithium battery below 45 degrees and away from sunlight.",
    "adapter.txt": "The power adapter runs hot when the fan is blocked.",
    "kettle.txt": "The kettle boils water in four minutes.",
}


@pytest.fixture
def shop(tenant, tmp_path, embedder):
    """A KB whose tenant expands "charger" two ways: a search of QUERY has three variants."""
    kb = create_knowledge_base(tenant=tenant, name="shop")
    for name, text in PASSAGES.items():
        (tmp_path / name).write_text(text)
    Ingester(kb).ingest(discover_files([tmp_path]))
    Synonym.objects.create(
        tenant=tenant, kind=Synonym.Kind.EXPLICIT, terms=["charger"], replacements=["lithium battery", "power adapter"]
    )
    return kb


def search(kb, expand=SYNONYMS, **options):
    return run(kb, QUERY, top_k=10, expand=expand, **options)


def outcome(response) -> tuple:
    """All that fusion and the legs decided: the variants, and each hit with its scores and ranks."""
    hits = [
        (hit.chunk_id, hit.fused_score, hit.relevance, hit.retrievers, hit.matched_queries) for hit in response.results
    ]
    return response.queries, hits, response.candidates, response.degraded


def sequential(kb, **options):
    """The search with its variants one after another: inside a transaction, whose rows other
    connections could not see, ``per_variant`` runs them on the calling thread."""
    with transaction.atomic():
        return search(kb, **options)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_hybrid_search_with_variants_side_by_side_answers_as_one_after_another(shop):
    alone = sequential(shop, mode="hybrid")
    assert len(alone.queries) == 3 and alone.degraded == []
    assert outcome(search(shop, mode="hybrid")) == outcome(alone)
    for more in ({"feedback_docs": 2}, {"leg_candidates": "union"}):  # the feedback pass; the candidate union
        assert outcome(search(shop, mode="hybrid", **more)) == outcome(sequential(shop, mode="hybrid", **more))


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_candidate_unions_variants_overlap(shop, monkeypatch):
    """Each dense list's cosines of BM25's passages (read by id) wait until all three variants' reads started."""
    options = {"mode": "hybrid", "leg_candidates": "union"}
    expected = outcome(sequential(shop, **options))
    assert any(set(hit[3]) == {"bm25", "vector"} for hit in expected[1])
    meet_before(monkeypatch, PgVectorIndex, "similarities", parties=3)
    assert outcome(search(shop, **options)) == expected


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_dense_legs_variants_overlap(shop, monkeypatch):
    """Each variant's pgvector search waits until all three have started: one after another, the
    first would wait forever (the barrier breaks and the leg fails)."""
    expected = outcome(sequential(shop, mode="vector"))
    meet_before(monkeypatch, PgVectorIndex, "search", parties=3)
    assert outcome(search(shop, mode="vector")) == expected


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_bm25_legs_index_searches_checks_and_feedback_passes_overlap(shop, monkeypatch):
    options = {"mode": "bm25", "feedback_docs": 2}
    expected = outcome(sequential(shop, **options))
    meet_before(monkeypatch, TantivyLexicalIndex, "search", parties=3)  # first pass and feedback pass
    meet_before(monkeypatch, selectors, "hashes_of_chunks_passing", parties=3)  # their hits' checks
    assert outcome(search(shop, **options)) == expected


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_llm_rewrites_variants_are_searched_side_by_side(shop, monkeypatch, settings):
    """The multi-query rewrite (a fake chat server over a socket) gives three more variants."""
    options = {"mode": "vector", "expand": ExpansionOptions(synonyms=False, llm=True, max_expansions=3)}
    with ChatServer() as chat:
        chat.answer = "charger temperature limit\nhow warm does the charger run\ncharger overheating"
        settings.LLM_URL, settings.LLM_MODEL = chat.url, "tiny-chat"
        settings.LLM_TIMEOUT_S = 10  # a loaded machine must not turn the rewrite into a degradation here
        expected = outcome(sequential(shop, **options))
        assert [query["origin"] for query in expected[0]] == ["original", "llm", "llm", "llm"]
        meet_before(monkeypatch, PgVectorIndex, "search", parties=4)
        assert outcome(search(shop, **options)) == expected


def test_results_come_in_the_items_order_whatever_order_they_finish_in():
    finished: list[int] = []
    later_done = threading.Event()

    def work(item: int) -> int:
        if item == 1:  # the first pool item ends only after the last one did
            assert later_done.wait(RACE_TIMEOUT_S)
        finished.append(item)
        if item == 3:
            later_done.set()
        return item * 10

    assert per_variant(work, [0, 1, 2, 3], database=False) == [0, 10, 20, 30]
    assert finished.index(3) < finished.index(1)


def test_the_first_failing_item_in_order_raises_once_all_ended():
    ended: list[int] = []

    def work(item: int) -> int:
        ended.append(item)
        if item in (1, 2):
            raise ValueError(f"item {item}")
        return item

    with pytest.raises(ValueError, match="item 1"):
        per_variant(work, [0, 1, 2, 3], database=False)
    assert sorted(ended) == [0, 1, 2, 3]


@pytest.mark.django_db
def test_database_work_inside_a_transaction_stays_on_the_calling_thread():
    threads = per_variant(lambda item: threading.get_ident(), [0, 1, 2], database=True)
    assert threads == [threading.get_ident()] * 3
    apart = per_variant(lambda item: threading.get_ident(), [0, 1, 2], database=False)
    assert apart[0] == threading.get_ident() and threading.get_ident() not in apart[1:]


def test_variants_not_searched_within_the_deadline_fail_with_cause_deadline(settings):
    settings.SEARCH_DEADLINE_MS = 50
    release = threading.Event()

    def work(item: int) -> int:
        if item:
            assert release.wait(RACE_TIMEOUT_S)  # held past the deadline
        return item

    try:
        with pytest.raises(ComponentError) as raised:
            per_variant(work, [0, 1], database=False)
    finally:
        release.set()
    assert raised.value.cause == "deadline" and "SEARCH_DEADLINE_MS" in raised.value.message
