"""X-Request-ID: generated when absent, echoed when sane, replaced otherwise; always on the response
and always equal to the ``request_id`` an error body reports."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from django.test import Client

from core.request_id import REQUEST_ID_HEADER

URL = "/api/v1/retrieval/vector"
GENERATED_ID = re.compile(r"^[0-9a-f]{32}$")


def post_without_key(client: Client, **headers):
    """A 401 answered by DRF: passes through the whole middleware stack and reports its request id."""
    return client.post(URL, data=json.dumps({"query": "x"}), content_type="application/json", **headers)


def body_request_id(response) -> str:
    return json.loads(response.content)["error"]["request_id"]


def test_request_id_is_generated_when_absent(client):
    first, second = post_without_key(client), post_without_key(client)
    assert first.status_code == second.status_code == 401
    for response in (first, second):
        assert GENERATED_ID.match(response[REQUEST_ID_HEADER]), response[REQUEST_ID_HEADER]
        assert body_request_id(response) == response[REQUEST_ID_HEADER]
    assert first[REQUEST_ID_HEADER] != second[REQUEST_ID_HEADER]


@pytest.mark.parametrize(
    "incoming",
    ["abc", "req-123_4.5:6", "A" * 128, str(uuid.UUID(int=7)), "0" * 32, "trace:span.01-02"],
)
def test_a_valid_request_id_is_echoed(client, incoming):
    response = post_without_key(client, HTTP_X_REQUEST_ID=incoming)
    assert response.status_code == 401
    assert response[REQUEST_ID_HEADER] == incoming
    assert body_request_id(response) == incoming


@pytest.mark.parametrize(
    "incoming",
    [
        "A" * 129,
        "x" * 300,
        "",
        "has space",
        " leading-space",
        "abc\r\nSet-Cookie: sessionid=evil",
        "abc\nX-Injected: 1",
        "abc\r\n\r\n<html>smuggled body</html>",
        "tab\there",
        "semi;colon",
        "<script>alert(1)</script>",
        "caf\u00e9",
        "slash/and?query=1",
    ],
)
def test_an_invalid_request_id_is_replaced(client, incoming):
    response = post_without_key(client, HTTP_X_REQUEST_ID=incoming)
    assert response.status_code == 401
    replaced = response[REQUEST_ID_HEADER]
    assert GENERATED_ID.match(replaced) and replaced != incoming
    assert body_request_id(response) == replaced
    assert "Set-Cookie" not in response and "X-Injected" not in response
    assert b"smuggled" not in response.content


@pytest.mark.parametrize("incoming", ["abc\n", "A" * 128 + "\n"])
def test_a_request_id_with_a_trailing_newline_is_replaced(incoming):
    response = post_without_key(Client(raise_request_exception=False), HTTP_X_REQUEST_ID=incoming)
    assert response.status_code == 401
    assert GENERATED_ID.match(response[REQUEST_ID_HEADER])


@pytest.mark.django_db
def test_every_kind_of_response_carries_the_request_id(client, tenant):
    from tenants.services import create_api_key

    key = {"HTTP_AUTHORIZATION": f"Bearer {create_api_key(tenant=tenant).raw_key}"}
    responses = {
        "404 json": client.get("/api/v1/unknown", HTTP_X_REQUEST_ID="rid-404"),
        "405": client.get(URL, HTTP_X_REQUEST_ID="rid-405", **key),
        "400": client.post(URL, data="{}", content_type="application/json", HTTP_X_REQUEST_ID="rid-400", **key),
        "200": client.post(
            URL,
            data=json.dumps({"query": "hello"}),
            content_type="application/json",
            HTTP_X_REQUEST_ID="rid-200",
            **key,
        ),
        "html page": client.get("/admin/login/", HTTP_X_REQUEST_ID="rid-html"),
    }
    assert {name: r.status_code for name, r in responses.items()} == {
        "404 json": 404, "405": 405, "400": 400, "200": 200, "html page": 200,
    }  # fmt: skip
    for name, response in responses.items():
        assert response[REQUEST_ID_HEADER] == f"rid-{name.split()[0]}", name
    assert json.loads(responses["200"].content)["request_id"] == "rid-200"
    for name in ("404 json", "405", "400"):
        assert body_request_id(responses[name]) == f"rid-{name.split()[0]}"


def test_non_api_404_is_html_but_still_carries_the_request_id(client):
    response = client.get("/definitely-not-here/", HTTP_X_REQUEST_ID="rid-page")
    assert response.status_code == 404
    assert not response["Content-Type"].startswith("application/json")
    assert response[REQUEST_ID_HEADER] == "rid-page"
