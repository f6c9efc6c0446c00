"""The legs side by side (retrieval.services.legs): BM25 runs while the query embeds, and the
request thread's critical path adds up."""

import pytest

from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base
from tests.concurrency import wait_until
from tests.retrieval.services.conftest import names, run

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def test_the_bm25_leg_runs_while_the_query_embeds_and_the_critical_path_adds_up(
    tenant, tmp_path, remote_model, embedding_server, spans
):
    """The remote embedder holds the query's vector until the BM25 leg is done (its keyword index
    search on the lexical pool and its check of the hits on the request thread): a pipeline that waited
    for the embedding before or while running BM25 would never see it done and fail below."""
    kb = create_knowledge_base(tenant=tenant, name="remote", embedding_model="remote:minilm")
    (tmp_path / "lock.txt").write_text("The PPR-9087 lock fits doors 35 to 80 mm thick.")
    (tmp_path / "kettle.txt").write_text("Kettles boil water in four minutes.")
    Ingester(kb).ingest(discover_files([tmp_path]))
    answer = embedding_server.respond

    def bm25_spans():
        return [span for span in spans.get_finished_spans() if span.name == "search.bm25"]

    def after_the_bm25_leg(request):
        # A search that waited for the embedding first never ends the BM25 leg: the wait fails, and with
        # it the embedding request, and the assertions below.
        wait_until(lambda: len(bm25_spans()) >= 3, timeout=10, message="the BM25 leg to end while embedding")
        return answer(request)

    embedding_server.respond = after_the_bm25_leg
    spans.clear()
    response = run(kb, "How thick can the door be for the PPR-9087 lock?", mode="hybrid", top_k=2)

    assert names(response)[0] == "lock.txt" and set(response.results[0].retrievers) == {"vector", "bm25"}
    [embed] = [span for span in spans.get_finished_spans() if span.name == "search.embed"]
    prepare, index_search, check = sorted(bm25_spans(), key=lambda span: span.start_time)
    vector_plan, vector_search = sorted(
        (span for span in spans.get_finished_spans() if span.name == "search.vector"), key=lambda span: span.start_time
    )
    # The BM25 leg was done while the query was still embedding (when the embedding thread started its
    # span is the scheduler's choice: under load it can start after the whole leg).
    assert check.end_time < embed.end_time
    assert vector_search.start_time >= embed.end_time
    path = response.critical_path_ms
    assert {"embed", "bm25", "vector"} <= set(path)
    # The request thread's own stages and waits add up to the total; counting the overlapped embedding
    # in full beside the BM25 leg (a sequential account) would exceed it.
    assert sum(path.values()) == pytest.approx(response.timings_ms["total"], abs=0.05)
