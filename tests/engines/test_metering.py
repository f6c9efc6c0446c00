"""The engines' meter (engines.metering): what each engine reports, against fake remote peers over real
sockets whose token counts the tests set, and the real local model's tokenizer."""

from __future__ import annotations

import contextvars
import threading

import pytest

from engines import metering
from engines.embedders import DEFAULT_LOCAL_MODEL, get_embedder
from engines.embedders.openai_embedder import OpenAICompatibleEmbedder
from engines.llm import ChatClient
from engines.metering import KINDS, Meter, counting_cpu, metered, record
from engines.rerankers.base import RerankError
from engines.rerankers.remote import RemoteReranker
from tests.engines.test_llm_triples import ChatServer
from tests.peers import Reply


def nonzero(meter: Meter) -> dict[str, float]:
    return {kind: amount for kind, amount in meter.units().items() if amount and kind != "cpu_ms"}


def test_units_go_to_the_open_meter_only_and_unknown_ones_are_refused():
    record(embedding_tokens=5)  # no meter: nothing to count, no error
    with metered(Meter()) as meter:
        record(embedding_tokens=5, embedding_calls=1)
        record(embedding_tokens=2)
        with pytest.raises(ValueError, match="unknown cost units"):
            record(embedding_tokns=1)
    record(embedding_tokens=100)
    assert nonzero(meter) == {"embedding_tokens": 7, "embedding_calls": 1}
    assert set(meter.units()) == set(KINDS)


def test_a_pool_thread_reports_to_the_meter_of_the_context_it_runs_in_and_its_cpu_counts():
    meter = Meter()

    def work() -> None:
        record(rerank_pairs=3)
        sum(i * i for i in range(200_000))  # some CPU time on this thread

    with metered(meter):
        thread = threading.Thread(target=contextvars.copy_context().run, args=(counting_cpu(work),))
        thread.start()
        thread.join()
    assert nonzero(meter) == {"rerank_pairs": 3}
    assert meter.units()["cpu_ms"] > 0


def test_cpu_taken_out_by_a_nested_charge_is_not_counted_twice():
    meter = Meter()
    meter.exclude_cpu(3600.0)  # more than this test's thread ever ran
    assert meter.units()["cpu_ms"] == 0.0


def test_a_remote_embedder_reports_the_servers_usage_per_call(embedding_server):
    embedding_server.tokens_per_input = 5
    client = OpenAICompatibleEmbedder(
        "remote:minilm", url=embedding_server.url, api_key="", timeout_s=2.0, batch_size=2, token_counter=len
    )
    with metered(Meter()) as meter:
        client.embed_documents(["one", "two", "three"])  # two batches
        client.embed_queries(["four"])
    assert nonzero(meter) == {"embedding_tokens": 20, "embedding_calls": 3}


def test_a_remote_embedder_without_usage_counts_with_its_stand_in_tokenizer(embedding_server):
    client = OpenAICompatibleEmbedder(
        "remote:minilm", url=embedding_server.url, api_key="", timeout_s=2.0, batch_size=8, token_counter=len
    )
    with metered(Meter()) as meter:
        client.embed_documents(["abc", "de"])
    assert nonzero(meter) == {"embedding_tokens": 5, "embedding_calls": 1}  # len() is the counter here


def test_a_failed_remote_embedding_reports_nothing(embedding_server):
    embedding_server.tokens_per_input = 5
    client = OpenAICompatibleEmbedder(
        "remote:minilm", url=embedding_server.url, api_key="", timeout_s=2.0, batch_size=8, token_counter=len
    )
    embedding_server.mode = "500"
    with metered(Meter()) as meter, pytest.raises(Exception, match="failed"):
        client.embed_documents(["abc"])
    assert nonzero(meter) == {}


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["", ":torch"])  # ONNX (the default) and sentence-transformers count alike
def test_the_local_model_reports_the_tokens_it_read_with_special_tokens(runtime):
    embedder = get_embedder(DEFAULT_LOCAL_MODEL + runtime)
    texts = ["SKY-10023908 hub", "鱼香肉丝", "word " * 400]  # the last is truncated at the model's length
    with metered(Meter()) as meter:
        embedder.embed_documents(texts)
    expected = sum(min(embedder.count_tokens(text), embedder.max_tokens) + 2 for text in texts)
    assert nonzero(meter) == {"embedding_tokens": expected, "embedding_calls": 1}


def test_a_remote_reranker_reports_its_pairs_once_it_answers(rerank_server):
    reranker = RemoteReranker(rerank_server.url, retries=0)
    with metered(Meter()) as meter:
        reranker.rerank("lock", ["a lock", "a door", "a key"])
        rerank_server.mode = "500"
        with pytest.raises(RerankError):
            reranker.rerank("lock", ["a lock"])
    assert nonzero(meter) == {"rerank_pairs": 3, "rerank_calls": 1}


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        ({"prompt_tokens": 41, "completion_tokens": 9, "total_tokens": 50}, {"tokens_in": 41, "tokens_out": 9}),
        (None, {}),  # a server sending no usage: the call, no tokens
        ({"prompt_tokens": "many", "completion_tokens": -1}, {}),
    ],
)
def test_a_chat_completion_reports_the_usage_it_answers_under_its_purpose(usage, expected):
    with ChatServer() as server:
        body = ChatServer.completion("an answer")
        server.reply = Reply(body=body if usage is None else {**body, "usage": usage})
        with metered(Meter()) as meter:
            ChatClient().complete(server.url, "", {"model": "tiny"}, timeout_s=2.0, deadline_s=3.0, purpose="triples")
    assert nonzero(meter) == {"llm_triples_calls": 1, **{f"llm_triples_{unit}": n for unit, n in expected.items()}}


def test_a_chat_completion_needs_a_known_purpose():
    with pytest.raises(ValueError, match="unknown LLM purpose"):
        ChatClient().complete("http://127.0.0.1:9", "", {}, timeout_s=1.0, deadline_s=1.0, purpose="chat")
    assert metering.current() is None
