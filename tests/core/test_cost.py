"""Cost accounting (core.cost) through the real stack: searches through the API with a remote embedder,
reranker and chat model (fake peers over real sockets whose token counts the tests set), ingestion and a
version build charged to their tenant, the day's sums in ``GET /api/v1/stats``, the console dashboard
and ``/metrics``."""

from __future__ import annotations

import pytest

from core.cost import charged_to, price_setting, priced, tenant_costs
from engines.metering import KINDS, Meter, metered, record
from graph.community_build import rebuild_communities
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base
from knowledge.versions import fill_version, start_version_build, version_build_files
from tests.conftest import client_for, scraped_metrics
from tests.engines.test_llm_triples import GOOD, ChatServer
from tests.factories import TenantFactory
from tests.graph.test_community_build import DISHES, LOCKS
from tests.peers import Reply

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

TOKENS_PER_INPUT = 7  # the fake embedder's usage per text
LLM_USAGE = {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49}
PRICES = {
    "COST_PRICE_EMBEDDING_TOKEN": 0.001,
    "COST_PRICE_EMBEDDING_CALL": 0.5,
    "COST_PRICE_RERANK_PAIR": 0.01,
    "COST_PRICE_RERANK_CALL": 0.25,
    "COST_PRICE_LLM_TOKEN_IN": 0.002,
    "COST_PRICE_LLM_TOKEN_OUT": 0.004,
    "COST_PRICE_LLM_CALL": 0.125,
    "COST_PRICE_CPU_MS": 0.0,  # CPU time is real: not known in advance
}


def nonzero(cost: dict) -> dict:
    return {kind: n for kind, n in cost["units"].items() if n and kind != "cpu_ms"}


def inputs_sent(server) -> int:
    return sum(len(request.json()["input"]) for request in server.requests)


@pytest.fixture
def prices(settings):
    for name, price in PRICES.items():
        setattr(settings, name, price)
    settings.COST_CURRENCY = "EUR"


@pytest.fixture
def chat_server(settings):
    """The chat model: two alternative queries (or triples, or a summary), with a known usage."""
    with ChatServer() as server:
        server.reply = Reply(
            body={**ChatServer.completion("lock door thickness\nhow thick a door"), "usage": LLM_USAGE}
        )
        settings.LLM_URL, settings.LLM_MODEL, settings.LLM_TIMEOUT_S = server.url, "tiny", 2.0
        yield server


@pytest.fixture
def remote_kb(tenant, tmp_path, remote_model, embedding_server):
    embedding_server.tokens_per_input = TOKENS_PER_INPUT
    kb = create_knowledge_base(tenant=tenant, name="remote", embedding_model="remote:minilm")
    (tmp_path / "lock.txt").write_text("The PPR-9087 lock fits doors 35 to 80 mm thick. Its battery lasts a year.")
    (tmp_path / "kettle.txt").write_text("Descale the kettle monthly with citric acid.")
    embedding_server.requests.clear()
    Ingester(kb, keep_originals=True).ingest(discover_files([tmp_path]))
    return kb


def test_every_kind_has_a_price_setting_and_prices_multiply_units(settings, prices):
    assert {price_setting(kind) for kind in KINDS} == set(PRICES)
    settings.COST_PRICE_CPU_MS = 0.1
    units = {"embedding_tokens": 1000, "embedding_calls": 2, "rerank_pairs": 30, "rerank_calls": 1,
             "llm_expansion_tokens_in": 40, "llm_summaries_tokens_out": 9, "llm_triples_calls": 2, "cpu_ms": 12.5}  # fmt: skip
    cost = priced(units)
    assert cost["amounts"] == pytest.approx({
        "embedding_tokens": 1.0, "embedding_calls": 1.0, "rerank_pairs": 0.3, "rerank_calls": 0.25,
        "llm_expansion_tokens_in": 0.08, "llm_summaries_tokens_out": 0.036, "llm_triples_calls": 0.25, "cpu_ms": 1.25,
    })  # fmt: skip
    assert cost["amount"] == pytest.approx(4.166)
    assert cost["currency"] == "EUR"
    assert cost["units"] == {kind: units.get(kind, 0) for kind in KINDS}


def test_prices_default_to_zero(settings):
    assert all(getattr(settings, price_setting(kind)) == 0 for kind in KINDS)
    assert priced({"embedding_tokens": 10**6})["amount"] == 0


def test_a_search_answer_carries_its_cost_and_the_tenants_day_sums_it(
    remote_kb, embedding_server, rerank_server, chat_server, api_client, prices, settings
):
    ingested_tokens = TOKENS_PER_INPUT * inputs_sent(embedding_server)
    assert ingested_tokens > 0
    embedding_server.requests.clear()
    body = {"query": "door thickness", "rerank": True, "expand": {"llm": True, "max_expansions": 2}}
    response = api_client.post("/api/v1/retrieval/hybrid", body, format="json")
    assert response.status_code == 200, response.content
    answer = response.json()
    assert answer["degraded"] == [] and len(answer["queries"]) == 3  # the two alternatives were searched
    pairs = len(rerank_server.requests[0].json()["documents"])
    expected = {
        "embedding_tokens": TOKENS_PER_INPUT * 3, "embedding_calls": 1, "rerank_pairs": pairs, "rerank_calls": 1,
        "llm_expansion_tokens_in": 40, "llm_expansion_tokens_out": 9, "llm_expansion_calls": 1,
    }  # fmt: skip
    assert inputs_sent(embedding_server) == 3
    assert nonzero(answer["cost"]) == expected
    assert answer["cost"]["units"]["cpu_ms"] > 0
    amount = 21 * 0.001 + 0.5 + pairs * 0.01 + 0.25 + 40 * 0.002 + 9 * 0.004 + 0.125
    assert answer["cost"]["amount"] == pytest.approx(amount)
    assert answer["cost"]["currency"] == "EUR"

    stats = api_client.get("/api/v1/stats").json()["cost"]
    (today,) = stats["daily"]
    assert nonzero(today) == {**expected, "embedding_tokens": ingested_tokens + 21, "embedding_calls": 2}
    assert today["units"]["cpu_ms"] >= answer["cost"]["units"]["cpu_ms"]  # the request's CPU, rendering included
    assert stats["total"]["amount"] == pytest.approx(today["amount"])
    assert today["amount"] == pytest.approx(amount + ingested_tokens * 0.001 + 0.5)

    again = api_client.post("/api/v1/retrieval/hybrid", body, format="json").json()
    assert again["cached"] is True
    assert nonzero(again["cost"]) == {}  # a hit consumes only its lookup's CPU


def test_stats_are_the_tenants_own(remote_kb, api_client):
    assert nonzero(api_client.get("/api/v1/stats").json()["cost"]["total"])["embedding_tokens"] > 0
    other = client_for(TenantFactory()).get("/api/v1/stats").json()["cost"]
    assert other["daily"] == [] and nonzero(other["total"]) == {}


def test_a_version_build_is_charged_to_its_tenant(remote_kb, embedding_server, django_capture_on_commit_callbacks):
    before = nonzero(tenant_costs(remote_kb.tenant_id)["total"])
    with django_capture_on_commit_callbacks(execute=False):  # built in-process below, not by a worker
        version, _ = start_version_build(remote_kb, activate=False, chunk_size=64)
    embedding_server.requests.clear()
    fill_version(version, version_build_files(version), on_progress=lambda done: None)
    assert version.status == version.Status.READY
    after = nonzero(tenant_costs(remote_kb.tenant_id)["total"])
    built = TOKENS_PER_INPUT * inputs_sent(embedding_server)  # the chunks (and any validation query)
    assert built > 0
    assert after["embedding_tokens"] - before["embedding_tokens"] == built
    assert after["embedding_calls"] - before["embedding_calls"] == len(embedding_server.requests)


def test_llm_triples_and_summaries_are_charged_to_the_tenant(tenant, embedder, tmp_path, chat_server, settings):
    settings.GRAPH_LLM_TRIPLES, settings.GRAPH_LLM_SUMMARIES, settings.GRAPH_LLM_DEADLINE_S = True, True, 3.0
    chat_server.reply = Reply(body={**ChatServer.completion(GOOD), "usage": LLM_USAGE})
    kb = create_knowledge_base(tenant=tenant, name="graph", chunk_size=120, chunk_overlap=16)
    for position, text in enumerate(LOCKS + DISHES):
        (tmp_path / f"doc-{position}.txt").write_text(text)
    Ingester(kb).ingest(discover_files([tmp_path]))
    triples_calls = len(chat_server.requests)
    assert triples_calls == len(LOCKS + DISHES)  # one per document
    chat_server.requests.clear()
    rebuild_communities(kb.active_version)
    summary_calls = len(chat_server.requests)
    assert summary_calls >= 1
    units = nonzero(tenant_costs(tenant.pk)["total"])
    assert {kind: n for kind, n in units.items() if kind.startswith("llm_")} == {
        "llm_triples_calls": triples_calls, "llm_triples_tokens_in": 40 * triples_calls,
        "llm_triples_tokens_out": 9 * triples_calls, "llm_summaries_calls": summary_calls,
        "llm_summaries_tokens_in": 40 * summary_calls, "llm_summaries_tokens_out": 9 * summary_calls,
    }  # fmt: skip
    assert units["embedding_tokens"] > 0  # the local model's tokens: chunks and summaries


def test_a_charge_inside_another_meter_is_charged_once_to_its_own_tenant(tenant):
    with metered(Meter()) as outer:  # a request of no tenant (the console) running an ingestion eagerly
        with charged_to(tenant.pk):
            record(embedding_tokens=3, embedding_calls=1)
        record(rerank_pairs=2)
    assert {kind: n for kind, n in outer.units().items() if n and kind != "cpu_ms"} == {"rerank_pairs": 2}
    assert nonzero(tenant_costs(tenant.pk)["total"]) == {"embedding_tokens": 3, "embedding_calls": 1}

    with metered(Meter(tenant.pk)) as same, charged_to(tenant.pk):  # the tenant's own meter: the block is its
        record(embedding_tokens=5)
    assert same.units()["embedding_tokens"] == 5
    assert nonzero(tenant_costs(tenant.pk)["total"]) == {"embedding_tokens": 3, "embedding_calls": 1}


def test_the_dashboard_shows_the_tenants_cost(admin_client, tenant, prices):
    with charged_to(tenant.pk):
        record(embedding_tokens=1200, embedding_calls=2, llm_expansion_tokens_in=40, llm_triples_tokens_in=10)
    page = admin_client.get(f"/admin/tenants/tenant/{tenant.pk}/dashboard/")
    html = page.content.decode()
    assert page.status_code == 200 and 'id="cost"' in html
    (today,) = page.context["costs"]["daily"]
    assert (today["units"]["embedding_tokens"], today["llm_in"]) == (1200, 50)
    assert "1200 (2 calls)" in html and "50 / 0" in html and "Amount (EUR)" in html


def test_consumption_is_exposed_to_prometheus_by_kind(client, remote_kb, embedding_server, api_client, prices):
    tokens = frozenset({("kind", "embedding_tokens")})

    def scraped() -> tuple[float, float]:
        samples = scraped_metrics(client)
        units, amounts = samples["retrieval_cost_units_total"], samples.get("retrieval_cost_amount_total", {})
        assert all(dict(labels).keys() == {"kind"} for labels in units)  # no tenant label
        return units.get(tokens, 0), amounts.get(tokens, 0)

    units_before, amount_before = scraped()
    embedding_server.requests.clear()
    assert api_client.post("/api/v1/retrieval/vector", {"query": "kettle"}, format="json").status_code == 200
    assert inputs_sent(embedding_server) == 1
    units_after, amount_after = scraped()
    assert units_after - units_before == TOKENS_PER_INPUT
    assert amount_after - amount_before == pytest.approx(TOKENS_PER_INPUT * PRICES["COST_PRICE_EMBEDDING_TOKEN"])
