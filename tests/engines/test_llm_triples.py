"""Typed triples from an OpenAI-compatible chat endpoint: a fake one on 127.0.0.1 answers over a real
socket with a good answer, garbage, a slow answer or a 500; the request is bounded and asks for JSON."""

from __future__ import annotations

import json

import pytest

from engines.analysis import Analyzer
from engines.base import Entity, Extraction
from engines.graph_extraction import EntityExtractor
from engines.llm import ChatClient, LLMError, chat_endpoint
from engines.llm_triples import TRIPLES_SCHEMA, Triple, TripleExtractor, TripleLimits, parse_triples, with_triples
from tests.peers import Peer, Reply

PASSAGES = [
    "The PortaLock Pro door lock PPR-9087 is manufactured by Skyline Home in Shenzhen.",
    "王师傅在成都美食节获得金奖。",
    "Tomato seedlings need six hours of sunlight.",
]
GOOD = {
    "triples": [
        {"passage": 1, "subject": "PPR-9087", "relation": "Manufactured by", "object": "Skyline Home"},
        {"passage": 1, "subject": "Skyline Home", "relation": "located_in", "object": "Shenzhen"},
        {"passage": 2, "subject": "王师傅", "relation": "awarded", "object": "金奖"},
        {"passage": 9, "subject": "elsewhere", "relation": "not_sent", "object": "ignored"},
    ]
}


class ChatServer(Peer):
    def __init__(self):
        self.reply = Reply(body=self.completion(GOOD))
        super().__init__(lambda request: self.reply)

    @staticmethod
    def completion(content) -> dict:
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}


@pytest.fixture
def server():
    with ChatServer() as server:
        yield server


def extractor_for(server, **limits) -> TripleExtractor:
    bounds = {"timeout_s": 2.0, "deadline_s": 3.0, "max_input_chars": 10_000, "max_output_tokens": 500, **limits}
    return TripleExtractor(ChatClient(), url=server.url, api_key="k", model="tiny", limits=TripleLimits(**bounds))


def test_a_good_answer_gives_each_sent_passage_its_triples(server):
    found = extractor_for(server).triples(PASSAGES)
    assert found == {
        0: [Triple(0, "PPR-9087", "manufactured_by", "Skyline Home"), Triple(0, "Skyline Home", "located_in", "Shenzhen")],
        1: [Triple(1, "王师傅", "awarded", "金奖")],
        2: [],
    }  # fmt: skip
    [request] = server.requests
    assert request.path == "/v1/chat/completions" and request.headers["authorization"] == "Bearer k"
    body = request.json()
    assert (body["model"], body["max_tokens"], body["temperature"]) == ("tiny", 500, 0)
    assert body["response_format"]["json_schema"]["schema"] == TRIPLES_SCHEMA
    assert json.dumps(TRIPLES_SCHEMA) in body["messages"][0]["content"]
    assert all(f"[{n}]\n{text}" in body["messages"][1]["content"] for n, text in enumerate(PASSAGES, start=1))


def test_passages_beyond_the_input_budget_are_not_sent(server):
    budget = len(PASSAGES[0]) + len(PASSAGES[1])
    found = extractor_for(server, max_input_chars=budget).triples(PASSAGES)
    assert set(found) == {0, 1}
    assert PASSAGES[2] not in server.requests[0].json()["messages"][1]["content"]


@pytest.mark.parametrize(
    ("reply", "cause"),
    [
        (Reply(body=b"<html>Bad gateway</html>"), "malformed_response"),
        (
            Reply(body=ChatServer.completion("Sure! Here are the triples: PPR-9087 made by Skyline")),
            "malformed_response",
        ),
        (Reply(body=ChatServer.completion({"triples": [{"passage": "one", "subject": 1}]})), "malformed_response"),
        (Reply(500, {"error": {"message": "overloaded"}}), "server_error"),
        (Reply(body=ChatServer.completion(GOOD), delay_s=1.5), "timeout"),
        (Reply(body=ChatServer.completion(GOOD), drip_s=0.05), "deadline"),
    ],
)
def test_every_fault_is_a_typed_error(server, reply, cause):
    server.reply = reply
    with pytest.raises(LLMError) as raised:
        extractor_for(server, timeout_s=0.5, deadline_s=1.0).triples(PASSAGES)
    assert raised.value.cause == cause


def test_json_in_a_code_fence_is_accepted():
    fenced = "```json\n" + json.dumps({"triples": [GOOD["triples"][0]]}) + "\n```"
    assert parse_triples(fenced) == [Triple(0, "PPR-9087", "manufactured_by", "Skyline Home")]


def test_the_endpoint_path_is_added_to_a_base_url_only():
    assert chat_endpoint("http://h:1/") == "http://h:1/v1/chat/completions"
    assert chat_endpoint("http://h:1/openai/chat/completions") == "http://h:1/openai/chat/completions"


def test_triples_type_the_passages_relations_and_add_their_entities():
    extractor = EntityExtractor(Analyzer(), {"skyline": "skyline home"})
    entities = (Entity("ppr-9087", "PPR-9087", "code", 1), Entity("recall", "recall", "noun", 1))
    co_occurrence = Extraction.by_name(entities, [("ppr-9087", "recall", 0.5, "")])
    typed = with_triples(extractor, co_occurrence, [
        Triple(0, "PPR-9087", "manufactured_by", "Skyline"),  # an alias resolves to its entity
        Triple(0, "PPR-9087", "manufactured_by", "SKYLINE HOME"),
        Triple(0, "Shenzhen", "self", "shenzhen"),  # a relation to itself is no relation
    ])  # fmt: skip
    assert list(typed.named_relations()) == [("ppr-9087", "skyline home", 2.0, "manufactured_by")]
    kinds = {"ppr-9087": "code", "recall": "noun", "skyline home": "triple"}
    assert {entity.name: entity.kind for entity in typed.entities} == kinds
    assert with_triples(extractor, co_occurrence, []) is co_occurrence  # no triple: co-occurrence stays
