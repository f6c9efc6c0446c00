"""Query expansion against real rows in PostgreSQL and a real chat-completions server on a socket.

The LLM side is a ``tests.peers.Peer`` on 127.0.0.1 that answers like an OpenAI-compatible
endpoint or injects one fault; every fault must leave the original query searchable and be reported.
"""

from __future__ import annotations

import socket

import pytest

from knowledge.models import KnowledgeBaseVersion, Synonym
from knowledge.selectors.search import SynonymRule, searched_knowledge, tenant_vocabulary
from retrieval import expansion
from retrieval.expansion import ExpansionOptions, ExpansionResult, QueryVariant, expand_query, rm3
from retrieval.expansion.base import ExpansionContext
from tests.concurrency import wait_until
from tests.factories import ChunkFactory, KnowledgeBaseFactory, TenantFactory
from tests.peers import Peer, PeerRequest, Reply

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_spelling_cache():
    expansion.SPELLING.dictionaries.clear()
    yield
    expansion.SPELLING.dictionaries.clear()


def context(tenant, version_ids=(), max_expansions=3, synonyms=()) -> ExpansionContext:
    return ExpansionContext(
        tenant_id=tenant.pk, version_ids=tuple(version_ids), synonyms=synonyms, max_expansions=max_expansions
    )


def synonyms_of(tenant) -> tuple[SynonymRule, ...]:
    """The tenant's rules as a search reads them: at its current vocabulary stamp."""
    return tenant_vocabulary(tenant.pk, searched_knowledge(tenant).vocabulary_stamp).synonyms


def texts(variants: list[QueryVariant]) -> list[str]:
    return [variant.text for variant in variants]


def only(**switches) -> dict:
    """Options with every expander off except those given."""
    return {"synonyms": False, "spelling": False, "llm": False, **switches}


def run(query, tenant, versions=(), **options) -> ExpansionResult:
    synonyms = synonyms_of(tenant)
    return expand_query(
        query, tenant=tenant, version_ids=tuple(versions), synonyms=synonyms, options=ExpansionOptions(**options)
    )


def group(tenant, *terms, weight=0.5, **fields) -> Synonym:
    kind = Synonym.Kind.EQUIVALENT
    return Synonym.objects.create(tenant=tenant, kind=kind, terms=list(terms), weight=weight, **fields)


def rule(tenant, terms, replacements, weight=0.5) -> Synonym:
    return Synonym.objects.create(
        tenant=tenant, kind=Synonym.Kind.EXPLICIT, terms=terms, replacements=replacements, weight=weight
    )


# --- synonyms -------------------------------------------------------------------------------------


def synonyms(query, tenant, max_expansions=3) -> list[QueryVariant]:
    rules = synonyms_of(tenant)
    return expansion.SYNONYMS.expand(query, context(tenant, max_expansions=max_expansions, synonyms=rules))


def test_a_two_way_group_expands_in_both_directions(tenant):
    group(tenant, "退货", "退换货", weight=0.8)
    group(tenant, "wifi", "wireless")
    assert synonyms("如何退货", tenant) == [QueryVariant("如何退换货", 0.8, "synonym")]
    assert synonyms("退换货流程", tenant) == [QueryVariant("退货流程", 0.8, "synonym")]
    assert texts(synonyms("WiFi password", tenant)) == ["wireless password"]
    assert texts(synonyms("Wireless password", tenant)) == ["wifi password"]


def test_a_one_way_rule_only_rewrites_forward(tenant):
    rule(tenant, ["pwd", "passwd"], ["password", "passcode"], weight=0.9)
    assert synonyms("reset PWD now", tenant) == [
        QueryVariant("reset password now", 0.9, "synonym"),
        QueryVariant("reset passcode now", 0.9, "synonym"),
    ]
    assert texts(synonyms("passwd", tenant)) == ["password", "passcode"]
    assert synonyms("reset password", tenant) == []


def test_weights_are_carried_and_order_the_variants(tenant):
    group(tenant, "tv", "television", weight=0.4)
    rule(tenant, ["stand"], ["mount"], weight=0.9)
    assert synonyms("tv stand", tenant) == [
        QueryVariant("tv mount", 0.9, "synonym"),
        QueryVariant("television stand", 0.4, "synonym"),
    ]


def test_latin_terms_match_whole_words_only(tenant):
    group(tenant, "wifi", "wireless")
    assert synonyms("wifiless router", tenant) == []
    assert synonyms("hotwifi", tenant) == []
    assert synonyms("wifi2 module", tenant) == []
    assert texts(synonyms("wifi-router setup", tenant)) == ["wireless-router setup"]
    assert texts(synonyms("连不上wifi怎么办", tenant)) == ["连不上wireless怎么办"]  # no spaces in Chinese
    assert texts(synonyms("wifi or WIFI", tenant)) == ["wireless or wireless"]


def test_cjk_terms_match_as_substrings_but_not_inside_a_longer_member(tenant):
    group(tenant, "手机", "智能手机")
    assert texts(synonyms("苹果手机壳", tenant)) == ["苹果智能手机壳"]
    assert texts(synonyms("智能手机壳", tenant)) == ["手机壳"]


def test_inactive_rules_and_other_tenants_rules_are_ignored(tenant):
    group(tenant, "wifi", "wireless", is_active=False)
    other = TenantFactory()
    group(other, "wifi", "wlan")
    rule(other, ["router"], ["gateway"])
    assert synonyms("wifi router", tenant) == []
    assert texts(synonyms("wifi router", other)) == ["wlan router", "wifi gateway"]


def test_variants_are_capped_and_deduplicated(tenant):
    group(tenant, "tv", "television", "telly", "TV set", weight=0.5)
    group(tenant, "tv", "Television", weight=0.7)  # same text as above, case aside: the heavier one stays
    rule(tenant, ["tv"], ["TV"], weight=1.0)  # equal to the query: never a variant
    assert synonyms("tv stand", tenant, max_expansions=2) == [
        QueryVariant("Television stand", 0.7, "synonym"),
        QueryVariant("telly stand", 0.5, "synonym"),
    ]
    assert texts(synonyms("tv stand", tenant)) == ["Television stand", "telly stand", "TV set stand"]


# --- spelling -------------------------------------------------------------------------------------


@pytest.fixture
def kb(tenant):
    kb = KnowledgeBaseFactory(tenant=tenant)
    ChunkFactory(document__knowledge_base=kb, content="Router installation: the installation takes minutes.")
    ChunkFactory(document__knowledge_base=kb, content="Reset the router; installation help: 路由器安装指南.")
    return kb


def spelling(query, tenant, version_ids) -> list[QueryVariant]:
    return expansion.SPELLING.expand(query, context(tenant, version_ids))


def test_misspelled_words_are_corrected_from_the_kb_vocabulary(tenant, kb):
    version = kb.active_version_id
    assert spelling("instalation guide", tenant, [version]) == [QueryVariant("installation guide", 0.7, "spelling")]
    assert texts(spelling("Instalation of the ROUTR", tenant, [version])) == ["Installation of the ROUTER"]
    assert texts(spelling("路由器instalation 指南?", tenant, [version])) == ["路由器installation 指南?"]


def test_known_short_and_coded_words_are_left_alone(tenant, kb, settings):
    settings.SPELLING_WEIGHT = 0.55
    version = kb.active_version_id
    assert spelling("router installation minutes", tenant, [version]) == []  # all in the vocabulary
    assert spelling("rooter2 teh", tenant, [version]) == []  # digits; shorter than four letters
    assert spelling("instalación", tenant, [version]) == []  # not a plain Latin word
    assert spelling("rooter instalation", tenant, [version]) == [QueryVariant("router installation", 0.55, "spelling")]
    assert spelling("xyzzyq", tenant, [version]) == []  # nothing close enough


def test_the_vocabulary_is_the_tenants_searched_versions_only(tenant, kb):
    other_kb = KnowledgeBaseFactory(tenant=TenantFactory())
    ChunkFactory(document__knowledge_base=other_kb, content="configuration of the firmware")
    unsearched_kb = KnowledgeBaseFactory(tenant=tenant)
    ChunkFactory(document__knowledge_base=unsearched_kb, content="configuration of the firmware")
    # another tenant's version id in the request still only reads this tenant's chunks
    versions = [kb.active_version_id, other_kb.active_version_id]
    assert spelling("configuraton of the firmwre", tenant, versions) == []
    assert texts(spelling("configuraton firmwre", tenant, [unsearched_kb.active_version_id])) == [
        "configuration firmware"
    ]


def test_the_vocabulary_keeps_the_most_widespread_words(tenant, kb, settings):
    settings.SPELLING_MAX_VOCABULARY = 2  # in both chunks: installation, router, the (ties alphabetical)
    assert texts(spelling("instalation rooter", tenant, [kb.active_version_id])) == ["installation router"]
    expansion.SPELLING.dictionaries.clear()
    settings.SPELLING_MAX_VOCABULARY = 1
    assert texts(spelling("instalation rooter", tenant, [kb.active_version_id])) == ["installation rooter"]


def test_a_revision_bump_invalidates_the_cached_vocabulary(tenant, kb, django_assert_num_queries):
    version = kb.active_version
    assert spelling("firmwre update", tenant, [version.pk]) == []
    ChunkFactory(document__knowledge_base=kb, content="Firmware update steps.")
    with django_assert_num_queries(1):  # cached: only the revisions are read
        assert spelling("firmwre update", tenant, [version.pk]) == []
    KnowledgeBaseVersion.objects.filter(pk=version.pk).update(revision=version.revision + 1)
    assert texts(spelling("firmwre update", tenant, [version.pk])) == ["firmware update"]


def test_spelling_needs_no_query_without_candidate_words(tenant, kb, django_assert_num_queries):
    with django_assert_num_queries(0):
        assert spelling("路由器 安装 v2 abc", tenant, [kb.active_version_id]) == []


# --- LLM ------------------------------------------------------------------------------------------


class ChatServer(Peer):
    """``POST .../chat/completions``; ``mode`` picks a well-formed answer or one fault."""

    def __init__(self):
        self.mode = "ok"
        self.answer = "wireless password reset\nreset the wifi key"
        super().__init__(self.complete)

    def complete(self, request: PeerRequest) -> Reply:
        message = {"role": "assistant", "content": self.answer}
        if self.mode in ("429", "500", "400"):
            return Reply(int(self.mode), {"error": {"message": "nope"}})
        if self.mode == "garbage":
            return Reply(body=b"<html>Bad gateway</html>")
        if self.mode == "no_choices":
            return Reply(body={"id": "x", "object": "chat.completion"})
        if self.mode == "empty":
            message["content"] = "\n  \n"
        elif self.mode == "null_content":
            message["content"] = None
        delay_s = 60.0 if self.mode == "timeout" else 0.0  # answers after the test (close() cuts it short)
        drip_s = 0.2 if self.mode == "drip" else 0.0
        return Reply(body={"choices": [{"index": 0, "message": message}]}, delay_s=delay_s, drip_s=drip_s)


@pytest.fixture
def chat_server(settings):
    with ChatServer() as server:
        settings.LLM_URL = server.url
        settings.LLM_MODEL = "tiny-chat"
        settings.LLM_API_KEY = "secret"
        settings.LLM_TIMEOUT_S = 0.3
        yield server


def test_llm_alternatives_become_weighted_variants(tenant, chat_server):
    chat_server.answer = (
        "1. wireless password reset\n- reset the wifi key\n* WIFI PASSWORD\n\n"
        "2) forgot wifi password\n" + "x" * 301 + "\n"
    )
    result = run("wifi password", tenant, **only(llm=True, max_expansions=3))
    assert result.variants == [
        QueryVariant("wifi password", 1.0, "original"),
        QueryVariant("wireless password reset", 0.6, "llm"),
        QueryVariant("reset the wifi key", 0.6, "llm"),
        QueryVariant("forgot wifi password", 0.6, "llm"),
    ]
    assert result.degraded == []
    assert set(result.timings_ms) == {"llm"}
    [request] = chat_server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers.get("authorization") == "Bearer secret"
    body = request.json()
    assert (body["model"], body["temperature"], body["max_tokens"]) == ("tiny-chat", 0, 200)
    assert [message["role"] for message in body["messages"]] == ["system", "user"]
    assert "up to 3" in body["messages"][0]["content"]
    assert body["messages"][1]["content"] == "wifi password"


def test_llm_url_with_the_full_path_is_used_as_is(tenant, chat_server, settings):
    settings.LLM_URL = chat_server.url + "/openai/chat/completions/"
    settings.LLM_API_KEY = ""
    settings.LLM_WEIGHT = 0.3
    result = run("wifi password", tenant, **only(llm=True, max_expansions=1))
    assert result.variants[1:] == [QueryVariant("wireless password reset", 0.3, "llm")]
    calls = [(r.path, r.headers.get("authorization")) for r in chat_server.requests]
    assert calls == [("/openai/chat/completions", None)]


@pytest.mark.parametrize(
    ("mode", "cause"),
    [
        ("timeout", "timeout"),
        ("429", "rate_limited"),
        ("500", "server_error"),
        ("400", "server_error"),
        ("garbage", "malformed_response"),
        ("no_choices", "malformed_response"),
        ("empty", "malformed_response"),
        ("null_content", "malformed_response"),
    ],
)
def test_llm_faults_fall_back_to_the_original_query(tenant, chat_server, mode, cause):
    chat_server.mode = mode
    result = run("wifi password", tenant, **only(llm=True))
    assert result.variants == [QueryVariant("wifi password", 1.0, "original")]
    [entry] = result.degraded
    assert (entry["stage"], entry["component"], entry["cause"]) == ("expand", "llm", cause)
    assert entry["message"]
    [request] = chat_server.requests  # not retried
    ended = "hung_up" if mode == "timeout" else "answered"  # a timed-out client closed its connection
    wait_until(lambda: request.outcome == ended, message=f"the request {ended}")


@pytest.mark.parametrize("mode", ["drip", "timeout"])
def test_an_llm_answer_slower_than_the_search_deadline_is_cut_off(tenant, chat_server, settings, mode):
    """Dripping one byte every 200 ms never trips a read timeout; the 0.5 s total deadline stops it, long
    before the answer (held a minute, or dripped for half of one) has reached the client."""
    settings.SEARCH_DEADLINE_MS = 500
    settings.LLM_TIMEOUT_S = 5.0
    chat_server.mode = mode
    result = run("wifi password", tenant, **only(llm=True))
    assert texts(result.variants) == ["wifi password"]
    assert [entry["cause"] for entry in result.degraded] == ["deadline"]
    [request] = chat_server.requests
    assert request.outcome != "answered"


def test_llm_refused_connection_falls_back(tenant, settings):
    with socket.socket() as probe:  # a port nobody listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings.LLM_URL = f"http://127.0.0.1:{port}"
    settings.LLM_TIMEOUT_S = 0.3
    result = run("wifi password", tenant, **only(llm=True))
    assert texts(result.variants) == ["wifi password"]
    assert [entry["cause"] for entry in result.degraded] == ["connection_error"]  # refused: nothing waited for


def test_an_unconfigured_llm_is_reported_only_when_requested(tenant, settings):
    settings.LLM_URL = ""
    result = run("wifi", tenant, **only(llm=True))
    assert texts(result.variants) == ["wifi"]
    assert [(entry["component"], entry["cause"]) for entry in result.degraded] == [("llm", "not_configured")]

    tenant.expand_synonyms, tenant.expand_spelling, tenant.expand_llm = False, False, True
    result = run("wifi", tenant)
    assert (texts(result.variants), result.degraded, "llm" in result.timings_ms) == (["wifi"], [], False)


# --- expand_query ---------------------------------------------------------------------------------


def test_request_options_override_the_tenants_defaults(tenant, kb):
    tenant.expand_synonyms, tenant.expand_spelling, tenant.expand_llm = True, True, False
    group(tenant, "router", "gateway")
    versions = [kb.active_version_id]
    defaults = run("router instalation", tenant, versions)
    assert texts(defaults.variants) == ["router instalation", "router installation", "gateway instalation"]
    assert set(defaults.timings_ms) == {"synonyms", "spelling"}  # LLM off by the tenant's default

    tenant.expand_synonyms = False
    assert texts(run("router", tenant, versions).variants) == ["router"]
    assert texts(run("router", tenant, versions, synonyms=True).variants) == ["router", "gateway"]
    off = run("router instalation", tenant, versions, spelling=False)
    assert (texts(off.variants), off.timings_ms) == (["router instalation"], {})


def test_variants_are_merged_deduplicated_and_capped_across_expanders(tenant, kb, chat_server):
    rule(tenant, ["instalation"], ["installation"], weight=0.9)
    group(tenant, "router", "gateway", weight=0.2)
    chat_server.answer = "router installation\nrouter setup\nrouter mounting\nrouter install"
    result = run("router instalation", tenant, [kb.active_version_id], synonyms=True, spelling=True, llm=True)
    assert result.variants == [
        QueryVariant("router instalation", 1.0, "original"),
        QueryVariant("router installation", 0.9, "synonym"),  # also from spelling (0.7) and the LLM (0.6)
        QueryVariant("router setup", 0.6, "llm"),
        QueryVariant("router mounting", 0.6, "llm"),
    ]
    assert set(result.timings_ms) == {"synonyms", "spelling", "llm"}
    assert run("router", tenant, synonyms=True, max_expansions=0).variants == [QueryVariant("router", 1.0, "original")]


def test_a_crashing_expander_degrades_without_stopping_the_others(tenant, kb, monkeypatch, caplog):
    group(tenant, "router", "gateway")

    def crash(query, context):
        raise RuntimeError("vocabulary unavailable")

    monkeypatch.setattr(expansion.SPELLING, "expand", crash)
    result = run("router instalation", tenant, [kb.active_version_id], synonyms=True, spelling=True)
    assert texts(result.variants) == ["router instalation", "gateway instalation"]
    assert result.degraded == [
        {
            "stage": "expand",
            "component": "spelling",
            "cause": "internal_error",
            "message": "unexpected RuntimeError; details are in the service log",
        }
    ]
    assert "vocabulary unavailable" in caplog.text


# --- RM3 pseudo-relevance feedback (retrieval.expansion.rm3) --------------------------------------


def test_the_relevance_model_weighs_words_by_frequency_and_passage_score():
    passages = [(["kettle", "limescale", "limescale", "vinegar"], 3.0), (["limescale", "acid"], 1.0)]
    model = rm3.relevance_model(passages, terms=10)
    # P(w|D) · P(D|Q): limescale 2/4 · 3/4 + 1/2 · 1/4, kettle and vinegar 1/4 · 3/4, acid 1/2 · 1/4
    expected = {"limescale": 0.5, "kettle": 0.1875, "vinegar": 0.1875, "acid": 0.125}
    assert model == pytest.approx(expected)
    top_two = rm3.relevance_model(passages, terms=2)
    assert list(top_two) == ["limescale", "kettle"]  # ties by the word, so the choice is stable
    assert sum(top_two.values()) == pytest.approx(1.0)
    assert rm3.relevance_model([], terms=10) == {} == rm3.relevance_model([(["a"], 0.0)], terms=10)


def test_the_feedback_query_interpolates_the_query_with_the_relevance_model():
    passages = [(["kettle", "limescale"], 2.0)]
    query = rm3.feedback_query(["kettle", "descale"], passages, rm3.Feedback(docs=1, terms=10, query_weight=0.6))
    weights = dict(zip(query.tokens, query.weights))
    assert weights == pytest.approx({"kettle": 0.6 * 0.5 + 0.4 * 0.5, "descale": 0.3, "limescale": 0.2})
    assert query.tokens == ["kettle", "descale", "limescale"]  # heaviest first
    assert sum(query.weights) == pytest.approx(1.0)
    alone = rm3.feedback_query(["kettle", "kettle", "lid"], [], rm3.Feedback(1, 10, 0.5))
    assert dict(zip(alone.tokens, alone.weights)) == pytest.approx({"kettle": 2 / 3, "lid": 1 / 3})
    assert not rm3.Feedback(0, 10, 0.5).enabled and not rm3.Feedback(5, 10, 1.0).enabled
    assert rm3.Feedback(5, 10, 0.5).enabled
