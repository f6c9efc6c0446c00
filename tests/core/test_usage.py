"""The per-tenant usage counters in the real Redis: what the dashboard reads, and their bounds."""

from django.core.cache import cache

from core import usage
from core.usage import ServedQuery, count_query, query_usage
from tests.concurrency import wait_until

DAY = 86400
NOW = 1_780_000_000.0  # a fixed instant, so days and windows are known


def served(query="kettle", mode="hybrid", cached=False, latency_ms=10.0, hits=3, degraded=()):
    return ServedQuery(mode, cached, latency_ms, query, hits, tuple(degraded))


def test_queries_are_counted_per_day_and_mode_with_cache_hits():
    count_query(1, served(mode="bm25"), now=NOW - DAY)
    count_query(1, served(mode="hybrid"), now=NOW)
    count_query(1, served(mode="hybrid", cached=True), now=NOW)
    count_query(2, served(mode="vector"), now=NOW)  # another tenant
    daily = query_usage(1, days=3, now=NOW)["daily"]
    assert [row["date"] for row in daily] == ["2026-05-26", "2026-05-27", "2026-05-28"]
    assert [(row["modes"], row["total"], row["cache_hit_ratio"]) for row in daily] == [
        ({}, 0, None), ({"bm25": 1}, 1, 0.0), ({"hybrid": 2}, 2, 0.5),
    ]  # fmt: skip
    assert usage.query_counts(1) == {"served": 3, "cache_hits": 1, "cache_hit_ratio": 0.3333}


def test_latency_percentiles_degradations_and_query_rankings(settings):
    for latency in range(1, 101):
        count_query(1, served(latency_ms=float(latency)), now=NOW)
    count_query(1, served(query="  Where   is MY order ", hits=0, degraded=["rerank", "vector"]), now=NOW)
    count_query(1, served(query="where is my order", hits=0, degraded=["rerank"]), now=NOW)
    numbers = query_usage(1, now=NOW)
    assert numbers["latency_ms"] == {"p50": 49.0, "p95": 95.0, "searches": 102}  # 1..100 and two 10s
    assert numbers["degraded"] == {"rerank": 2, "vector": 1}
    assert numbers["top_queries"] == [("kettle", 100), ("where is my order", 2)]
    assert numbers["no_result_queries"] == [("where is my order", 2)]
    assert numbers["window"] == {"hybrid": 102}
    later = NOW + 2 * settings.RATE_LIMIT_WINDOW_S
    assert query_usage(1, now=later)["window"] == {}  # a later window starts at zero


def nearest_rank(latencies, share):
    ordered = sorted(latencies)
    return ordered[-(-len(ordered) * share // 100) - 1]


def test_each_day_has_its_own_latency_percentiles_within_a_bucket_of_the_exact_ones():
    yesterday = [0.004, 3.5, 7.25, 12.0, 250.0]  # 4 µs: under the floor, counted in its bucket
    today = [float(ms) for ms in range(1, 101)] + [1234.5]
    for latency in yesterday:
        count_query(1, served(latency_ms=latency), now=NOW - DAY)
    for latency in today:
        count_query(1, served(latency_ms=latency, cached=latency < 10), now=NOW)
    count_query(2, served(latency_ms=5000.0), now=NOW)  # another tenant's
    daily = query_usage(1, days=3, now=NOW)["daily"]
    assert daily[0]["latency_ms"] is None  # no search that day: no figure, not a zero
    for row, latencies in ((daily[1], yesterday), (daily[2], today)):
        for share in (50, 95):
            exact, drawn = nearest_rank(latencies, share), row["latency_ms"][f"p{share}"]
            assert exact - 0.005 <= drawn <= max(exact, usage.LATENCY_FLOOR_MS) * usage.LATENCY_BUCKET_GROWTH + 0.005
    assert daily[2]["latency_ms"] == {"p50": 52.04, "p95": 98.13}  # exact: 51 and 96 ms; their buckets end there
    ttl = cache.ttl(usage._key(1, "daily_latency:2026-05-28"))
    assert usage.DAYS_KEPT * DAY - 60 < ttl <= usage.DAYS_KEPT * DAY


def test_rankings_and_latencies_stay_bounded(monkeypatch):
    monkeypatch.setattr(usage, "QUERIES_KEPT", 3)
    monkeypatch.setattr(usage, "LATENCIES_KEPT", 4)
    for repeat, query in [(5, "a"), (4, "b"), (3, "c"), (1, "d"), (1, "e")]:
        for _ in range(repeat):
            count_query(1, served(query=query), now=NOW)
    numbers = query_usage(1, now=NOW)
    assert [query for query, _ in numbers["top_queries"]][:3] == ["a", "b", "c"]
    assert len(numbers["top_queries"]) == 3 and numbers["latency_ms"]["searches"] == 4


def test_with_redis_down_nothing_is_counted_and_the_reader_answers_none(private_redis):
    private_redis()
    count_query(1, served(), now=NOW)  # no error
    assert query_usage(1, now=NOW) is None


def sent_queries(tenant_id: int):
    """The tenant's ``queries`` counter as Redis holds it, read without sending this process's sums."""
    return cache.get(usage._key(tenant_id, "queries"))


def test_searches_are_summed_and_sent_in_one_round_trip_which_a_reader_sends_first(settings, redis_round_trips):
    settings.USAGE_COUNTERS_FLUSH_S = 3600  # the timer never fires during this test
    for mode in ("hybrid", "hybrid", "bm25"):
        count_query(1, served(mode=mode, cached=mode == "bm25", degraded=["rerank"]), now=NOW)
    assert sent_queries(1) is None
    sent_before = redis_round_trips[0]
    usage.flush_counts()
    assert redis_round_trips[0] - sent_before == 1 and sent_queries(1) == 3
    numbers = query_usage(1, days=1, now=NOW)
    assert numbers["daily"][0]["modes"] == {"bm25": 1, "hybrid": 2} and numbers["daily"][0]["cache_hit_ratio"] == 0.3333
    assert numbers["degraded"] == {"rerank": 3} and numbers["top_queries"] == [("kettle", 3)]


def test_the_sums_are_sent_within_the_interval_without_a_reader(settings):
    settings.USAGE_COUNTERS_FLUSH_S = 0.05
    count_query(1, served(), now=NOW)
    assert wait_until(lambda: sent_queries(1), message="the flush timer to send the sums") == 1


def test_with_no_interval_each_search_is_sent_at_once(settings):
    settings.USAGE_COUNTERS_FLUSH_S = 0
    count_query(1, served(), now=NOW)
    assert sent_queries(1) == 1


# --- cost units per tenant and day (core.cost charges them) ------------------------------------------


def test_cost_units_are_summed_per_tenant_and_day(settings, redis_round_trips):
    settings.USAGE_COUNTERS_FLUSH_S = 3600  # sent by the reader, with the searches, in one round trip
    usage.count_cost(1, {"embedding_tokens": 10, "embedding_calls": 1, "cpu_ms": 1.25}, now=NOW - DAY)
    usage.count_cost(1, {"embedding_tokens": 5, "rerank_pairs": 0, "cpu_ms": 0.5}, now=NOW)
    usage.count_cost(1, {"embedding_tokens": 7}, now=NOW)
    usage.count_cost(2, {"embedding_tokens": 100}, now=NOW)  # another tenant
    count_query(1, served(), now=NOW)
    cache.get("connected")  # the connection's own handshake is not the flush's
    sent_before = redis_round_trips[0]
    usage.flush_counts()
    assert redis_round_trips[0] - sent_before == 1
    assert usage.daily_costs(1, days=3, now=NOW) == [
        ("2026-05-26", {}),
        ("2026-05-27", {"cpu_ms": 1.25, "embedding_calls": 1.0, "embedding_tokens": 10.0}),
        ("2026-05-28", {"cpu_ms": 0.5, "embedding_tokens": 12.0}),  # a zero is not sent
    ]
    ttl = cache.ttl(usage._key(1, "cost:2026-05-28"))
    assert usage.DAYS_KEPT * DAY < ttl <= usage.COST_DAYS_KEPT * DAY


def test_with_redis_down_no_cost_is_counted_and_the_reader_answers_none(private_redis):
    private_redis()
    usage.count_cost(1, {"embedding_tokens": 3}, now=NOW)  # no error
    assert usage.daily_costs(1, days=2, now=NOW) is None
