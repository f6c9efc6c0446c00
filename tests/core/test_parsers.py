"""The JSON parser through the full stack: bodies DRF's parser let through as 500s are 400 ``malformed_json``."""

from __future__ import annotations

import json

import pytest
from rest_framework.renderers import JSONRenderer

from core.errors import error_body
from core.parsers import MAX_JSON_DEPTH, refusal

URL = "/api/v1/retrieval/search"


def post_raw(client, body: str | bytes, content_type: str = "application/json", **headers):
    return client.post(URL, data=body, content_type=content_type, **headers)


def assert_malformed(response, *fragments: str) -> None:
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == "malformed_json", error
    for fragment in fragments:
        assert fragment in error["message"], error["message"]


@pytest.mark.django_db
@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH, 500, 900, 5000, 20000])
def test_deep_nesting_is_a_400_not_a_recursion_error(api_client, depth):
    body = '{"query": "x", "filters": ' + '{"not": ' * depth + "{}" + "}" * depth + "}"
    assert_malformed(post_raw(api_client, body), f"nested deeper than {MAX_JSON_DEPTH} levels")


@pytest.mark.django_db
def test_nesting_up_to_the_limit_reaches_validation(api_client):
    depth = MAX_JSON_DEPTH - 3  # the body, "filters" and the innermost {} are levels too
    body = '{"query": "x", "filters": ' + '{"not": ' * depth + "{}" + "}" * depth + "}"
    response = post_raw(api_client, body)
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_filter", response.content


@pytest.mark.django_db
def test_deep_nesting_with_an_idempotency_key_is_a_400(api_client):
    body = "[" * 5000 + "]" * 5000
    assert_malformed(post_raw(api_client, body, HTTP_IDEMPOTENCY_KEY="deep-1"), "nested deeper than")


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body",
    [
        r'{"query": "x", "filters": {"\ud800": 1}}',
        r'{"query": "x", "filters": {"doc_type": "pdf\udfff"}}',
        r'{"query": "x", "filters": {"metadata.lang": {"in": ["en", "\ud83d"]}}}',
        r'{"query": "x", "weights": {"\ud800": 1}}',
        r'{"query": "x", "mode": "\ud800"}',
        r'{"query": "\ud800 battery"}',
        r'{"\udc00": 1, "query": "x"}',
    ],
)
def test_lone_surrogates_anywhere_are_a_400(api_client, body):
    assert_malformed(post_raw(api_client, body), "lone surrogate")


@pytest.mark.django_db
def test_a_valid_surrogate_pair_is_an_ordinary_character(api_client):
    response = post_raw(api_client, r'{"query": "battery \ud83d\udd0b", "mode": "bm25"}')
    assert response.status_code == 200, response.content
    assert response.json()["queries"][0]["text"] == "battery \U0001f50b"


@pytest.mark.django_db
@pytest.mark.parametrize("number", ["1e999", "-1e400", "Infinity", "NaN"])
def test_numbers_beyond_a_double_are_a_400(api_client, number):
    assert_malformed(post_raw(api_client, f'{{"query": "x", "weights": {{"bm25": {number}}}}}'))


@pytest.mark.django_db
def test_bytes_that_are_not_the_declared_encoding_are_a_400(api_client):
    assert_malformed(post_raw(api_client, b'{"query": "\xff\xfe"}'))


def test_refusal_finds_lone_surrogates_in_keys_and_values_and_depth_without_recursing():
    assert refusal({"a": [1, {"b": "ok"}], "c": None}) is None
    assert "lone surrogate" in refusal({"a": [1, {"b": "x\ud800"}]})
    assert "lone surrogate" in refusal([{"\udfff": 1}])
    deep: list = []
    for _ in range(MAX_JSON_DEPTH - 1):
        deep = [deep]
    assert refusal(deep) is None
    for _ in range(100_000):  # deeper than any recursion limit
        deep = [deep]
    assert refusal(deep) == f"the document is nested deeper than {MAX_JSON_DEPTH} levels"


def test_error_bodies_never_carry_unencodable_text(rf):
    body = error_body("invalid_request", "unknown retriever(s) \ud800", rf.get("/"), details={"\udc00": ["bad \ud83d"]})
    rendered = json.loads(JSONRenderer().render(body))
    assert rendered["error"]["message"] == "unknown retriever(s) \\ud800"
    assert rendered["error"]["details"] == {"\\udc00": ["bad \\ud83d"]}
