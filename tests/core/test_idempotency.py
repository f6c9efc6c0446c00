"""Idempotency-Key through the real API, records and locks in the real embedded Redis."""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connections

from retrieval import cache
from retrieval.errors import EmbedderUnavailable
from retrieval.services.search import search
from tests.concurrency import wait_until
from tests.conftest import client_for
from tests.factories import TenantFactory

URL = "/api/v1/retrieval/vector"
BODY = {"query": "hello", "top_k": 3}


def post(client, body=BODY, key: str | None = "order-42", url: str = URL, **headers):
    if key is not None:
        headers["HTTP_IDEMPOTENCY_KEY"] = key
    data = body if isinstance(body, str) else json.dumps(body)
    return client.post(url, data=data, content_type="application/json", **headers)


def assert_replay_of(replay, original):
    assert replay.status_code == original.status_code
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.content == original.content  # the very same body, request id included
    assert replay["Content-Type"] == original["Content-Type"]


def assert_error(response, status: int, code: str):
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert error["code"] == code
    assert error["request_id"] == response["X-Request-ID"]


@pytest.fixture(autouse=True)
def no_result_cache(settings):
    """Every request that is not replayed runs the pipeline, so counting its runs counts executions."""
    settings.SEARCH_CACHE_TTL_S = 0


@pytest.fixture
def count_searches(monkeypatch) -> list[str]:
    """The queries the search pipeline actually ran."""
    ran: list[str] = []

    def counted_search(tenant, request, knowledge=None):
        ran.append(request.query)
        return search(tenant, request, knowledge)

    monkeypatch.setattr(cache, "search", counted_search)
    return ran


@pytest.mark.django_db
def test_a_retry_replays_the_first_response(api_client, count_searches):
    first = post(api_client)
    assert first.status_code == 200
    assert "Idempotent-Replayed" not in first
    replay = post(api_client, HTTP_X_REQUEST_ID="the-retry")
    assert_replay_of(replay, first)
    assert replay["X-Request-ID"] == "the-retry"  # headers describe this request, the body the first one
    assert count_searches == ["hello"]


@pytest.mark.django_db
def test_the_same_json_written_differently_is_the_same_request(api_client, count_searches):
    first = post(api_client, body='{"query": "hello", "top_k": 3}')
    assert_replay_of(post(api_client, body='{"top_k":3,\n "query":"hello"}'), first)
    assert len(count_searches) == 1


@pytest.mark.django_db
def test_without_a_key_every_request_runs(api_client, count_searches):
    post(api_client, key=None)
    response = post(api_client, key=None)
    assert "Idempotent-Replayed" not in response
    assert len(count_searches) == 2


@pytest.mark.django_db
def test_the_same_key_with_another_body_or_endpoint_is_422(api_client):
    assert post(api_client).status_code == 200
    assert_error(post(api_client, body={**BODY, "top_k": 4}), 422, "idempotency_key_reused")
    assert_error(post(api_client, url="/api/v1/retrieval/bm25"), 422, "idempotency_key_reused")
    assert post(api_client, key="order-43", body={**BODY, "top_k": 4}).status_code == 200


@pytest.mark.django_db
def test_keys_are_scoped_by_tenant(api_client, count_searches):
    first = post(api_client)
    other = post(client_for(TenantFactory()))
    assert other.status_code == 200 and "Idempotent-Replayed" not in other
    assert other.json()["request_id"] != first.json()["request_id"]
    assert len(count_searches) == 2


def test_another_key_of_the_tenant_never_gets_a_replay(api_client, tenant, count_searches):
    """Keys of one tenant may read different documents (docs/permissions.md): one key's stored answer is
    another request to a second key, refused, never replayed."""
    first = post(api_client)
    assert first.status_code == 200
    other = post(client_for(tenant))
    assert_error(other, 422, "idempotency_key_reused")
    assert "Idempotent-Replayed" not in other
    assert len(count_searches) == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "status"),
    [({"query": "x", "top_k": 0}, 400), ({"query": "x", "kb_ids": [987654321]}, 404), ("{nope", 400)],
)
def test_client_errors_are_stored_and_replayed(api_client, body, status):
    first = post(api_client, body=body)
    assert first.status_code == status
    assert_replay_of(post(api_client, body=body), first)


@pytest.mark.django_db
def test_server_errors_are_not_stored(api_client, monkeypatch):
    def unavailable(tenant, request, knowledge=None):
        raise EmbedderUnavailable("the embedder is warming up")

    monkeypatch.setattr(cache, "search", unavailable)
    assert_error(post(api_client), 503, "embedder_unavailable")
    monkeypatch.setattr(cache, "search", search)
    retry = post(api_client)
    assert retry.status_code == 200 and "Idempotent-Replayed" not in retry
    assert_replay_of(post(api_client), retry)


@pytest.mark.django_db
def test_an_unhandled_error_releases_the_key(api_client, monkeypatch):
    monkeypatch.setattr(cache, "search", lambda tenant, request, knowledge=None: 1 / 0)
    with pytest.raises(ZeroDivisionError):  # the test client re-raises what became a 500
        post(api_client)
    monkeypatch.setattr(cache, "search", search)
    assert post(api_client).status_code == 200  # neither 409 (lock left behind) nor a stored 500


@pytest.mark.django_db
@pytest.mark.parametrize("key", ["", "has space", "naïve", "x" * 256, "a/b"])
def test_malformed_keys_are_400(api_client, key):
    assert_error(post(api_client, key=key), 400, "invalid_idempotency_key")


@pytest.mark.django_db
def test_a_long_uuid_like_key_is_fine(api_client):
    assert post(api_client, key="2f1c-9a:req_01HZY." + "x" * 200).status_code == 200


@pytest.mark.django_db
def test_records_expire(api_client, settings, count_searches):
    settings.IDEMPOTENCY_TTL_S = 1
    post(api_client)

    def run_again():  # replays until the record expires; then the search runs again
        response = post(api_client)
        return response.status_code == 200 and "Idempotent-Replayed" not in response

    wait_until(run_again, interval=0.1, message="the idempotency record to expire")
    assert len(count_searches) == 2


@pytest.mark.django_db(transaction=True)
def test_a_duplicate_while_the_first_is_in_flight_is_409(tenant, monkeypatch):
    """The first request blocks inside the pipeline (in a thread) while duplicates arrive."""
    entered, release = threading.Event(), threading.Event()

    def held_search(tenant, request, knowledge=None):
        if request.query == BODY["query"]:
            entered.set()
            release.wait(10)
        return search(tenant, request, knowledge)

    monkeypatch.setattr(cache, "search", held_search)
    client = client_for(tenant)
    results = {}

    def first_request():
        try:
            results["first"] = post(client)
        finally:
            connections.close_all()

    thread = threading.Thread(target=first_request)
    thread.start()
    try:
        assert entered.wait(10)
        assert_error(post(client), 409, "idempotency_in_flight")
        assert_error(post(client, body={**BODY, "top_k": 5}), 422, "idempotency_key_reused")
        assert post(client, key="another-key", body={"query": "other"}).status_code == 200
    finally:
        release.set()
        thread.join(10)
    assert results["first"].status_code == 200
    assert_replay_of(post(client), results["first"])


# --- Redis unavailable -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_redis_down_degrades_to_pass_through(private_redis, api_client, count_searches, caplog):
    first = post(api_client)
    assert_replay_of(post(api_client), first)
    private_redis()
    for _ in range(2):
        response = post(api_client)
        assert response.status_code == 200 and "Idempotent-Replayed" not in response
    assert len(count_searches) == 3
    assert len([r for r in caplog.records if "idempotency degraded" in r.getMessage()]) == 1
