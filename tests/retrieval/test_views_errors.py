"""What the retrieval endpoints answer to bad requests: keys, bodies, parameters and filters, each a
clear JSON error with a code, a message and the request id, never a 500."""

from __future__ import annotations

import json
import secrets
from datetime import timedelta

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from knowledge.models import KnowledgeBase
from tenants.services import create_api_key, revoke_api_key
from tests.factories import KnowledgeBaseFactory, TenantFactory
from tests.retrieval.api_corpus import (
    JUPITER,
    URL,
    assert_error,
    file_names,
    ok_results,
    search,
)

# === errors ========================================================================================


def test_missing_key_is_401_with_www_authenticate(client):
    response = client.post(URL, data=json.dumps({"query": "x"}), content_type="application/json")
    assert_error(response, 401, "missing_api_key", "credentials were not provided")
    assert response["WWW-Authenticate"] == "Bearer"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "header", ["Basic dXNlcjpwYXNz", "Token rk_abc_def", "Bearer", "Bearer    ", "Bearerrk_abc_def", "rk_abc_def"]
)
def test_malformed_authorization_header_is_403(client, header):
    response = client.post(URL, data="{}", content_type="application/json", HTTP_AUTHORIZATION=header)
    assert_error(response, 403, "invalid_api_key", "Authorization header must be 'Bearer <api key>'")
    assert "WWW-Authenticate" not in response


@pytest.mark.django_db
def test_wrong_revoked_and_expired_keys_are_403(client, tenant):
    valid = create_api_key(tenant=tenant).raw_key
    revoked = create_api_key(tenant=tenant)
    revoke_api_key(revoked.api_key)
    expired = create_api_key(tenant=tenant, expires_at=timezone.now() - timedelta(seconds=1))
    tampered = valid[:-1] + ("A" if valid[-1] != "A" else "B")
    unknown = f"rk_{secrets.token_hex(6)}_{secrets.token_urlsafe(32)}"
    for raw_key in [tampered, unknown, "not-a-key", revoked.raw_key, expired.raw_key]:
        response = client.post(URL, data="{}", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {raw_key}")
        assert_error(response, 403, "invalid_api_key", "invalid, expired or revoked")
    # The valid key of the same tenant passes authentication (and fails later, on the empty body).
    response = client.post(URL, data="{}", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {valid}")
    assert_error(response, 400, "invalid_request", "query")


@pytest.mark.django_db
def test_x_api_key_header_is_accepted(client, tenant):
    raw_key = create_api_key(tenant=tenant).raw_key
    response = client.post(
        URL, data=json.dumps({"query": "hello"}), content_type="application/json", HTTP_X_API_KEY=raw_key
    )
    assert response.status_code == 200
    assert response.json()["results"] == [] and response.json()["total"] == 0  # the tenant has no KB yet
    bad = client.post(URL, data="{}", content_type="application/json", HTTP_X_API_KEY=raw_key + "x")
    assert_error(bad, 403, "invalid_api_key", "invalid")


@pytest.mark.django_db
def test_unknown_and_foreign_kb_ids_are_the_same_404(api_client, tenant):
    foreign = KnowledgeBaseFactory(tenant=TenantFactory())
    unknown_id = foreign.pk + 10_000
    assert not KnowledgeBase.objects.filter(pk=unknown_id).exists()

    unknown = assert_error(
        search(api_client, {"query": "x", "kb_ids": [unknown_id]}), 404, "knowledge_base_not_found", str(unknown_id)
    )
    other = assert_error(
        search(api_client, {"query": "x", "kb_ids": [foreign.pk]}), 404, "knowledge_base_not_found", str(foreign.pk)
    )
    # No existence leak: apart from the id itself, the two answers are identical.
    assert unknown["message"].replace(str(unknown_id), "<id>") == other["message"].replace(str(foreign.pk), "<id>")
    assert unknown["message"] == f"unknown knowledge base id(s): {unknown_id}"
    assert unknown.get("details") == {"kb_ids": [unknown_id]}
    assert other.get("details") == {"kb_ids": [foreign.pk]}


@pytest.mark.django_db
def test_own_kb_next_to_a_foreign_kb_names_only_the_foreign_id(api_client, tenant):
    own = KnowledgeBaseFactory(tenant=tenant)
    foreign = KnowledgeBaseFactory(tenant=TenantFactory())
    error = assert_error(
        search(api_client, {"query": "x", "kb_ids": [own.pk, foreign.pk]}), 404, "knowledge_base_not_found"
    )
    assert error["message"] == f"unknown knowledge base id(s): {foreign.pk}"


@pytest.mark.django_db
def test_oversized_body_is_413(api_client):
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    body = json.dumps({"query": "x", "padding": "y" * limit})
    assert len(body.encode()) > limit
    response = api_client.post(URL, data=body, content_type="application/json")
    assert_error(response, 413, "payload_too_large", "larger than the allowed maximum")


@pytest.mark.django_db
def test_body_just_under_the_limit_is_parsed(api_client):
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    prefix, suffix = '{"query": "', '"}'
    body = prefix + "y" * (limit - len(prefix) - len(suffix)) + suffix
    assert len(body.encode()) == limit
    # Parsed, then refused by validation (query too long), not by size.
    assert_error(api_client.post(URL, data=body, content_type="application/json"), 400, "invalid_request", "query")


@pytest.mark.django_db
@pytest.mark.parametrize("body", ['{"query": "x"', "{'query': 'x'}", '{"query": NaN}', "\xff\xfe"])
def test_malformed_json_is_400(api_client, body):
    response = api_client.post(URL, data=body, content_type="application/json")
    assert_error(response, 400, "malformed_json", "JSON parse error")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ([{"query": "x"}], "Expected a dictionary, but got list"),
        ("just a string", "Expected a dictionary, but got str"),
        (42, "Expected a dictionary, but got int"),
        (None, "No data provided"),
    ],
)
def test_body_that_is_not_an_object_is_400(api_client, body, needle):
    assert_error(search(api_client, body), 400, "invalid_request", needle)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "needles"),
    [
        ({}, ["query: This field is required."]),
        ({"top_k": 5}, ["query: This field is required."]),
        ({"query": ""}, ["query: This field may not be blank."]),
        ({"query": "   \n\t "}, ["query: This field may not be blank."]),
        ({"query": None}, ["query: This field may not be null."]),
        ({"query": "x" * 2001}, ["query:", "2000"]),
        ({"query": "x", "top_k": 0}, ["top_k:", "greater than or equal to 1"]),
        ({"query": "x", "top_k": 101}, ["top_k:", "less than or equal to 100"]),
        ({"query": "x", "top_k": "ten"}, ["top_k: A valid integer is required."]),
        ({"query": "x", "top_k": 2.5}, ["top_k: A valid integer is required."]),
        ({"query": "x", "kb_ids": 5}, ["kb_ids:", "list"]),
        ({"query": "x", "kb_ids": "5"}, ["kb_ids:", "list"]),
        ({"query": "x", "kb_ids": {"id": 5}}, ["kb_ids:", "list"]),
        ({"query": "x", "kb_ids": ["five"]}, ["kb_ids:", "valid integer"]),
        ({"query": "x", "kb_ids": [0]}, ["kb_ids:", "greater than or equal to 1"]),
        ({"query": "x", "kb_ids": list(range(1, 102))}, ["kb_ids:", "100"]),
        ({"query": "x", "filters": None}, ["filters: This field may not be null."]),
    ],
)
def test_invalid_parameters_are_400_naming_the_field(api_client, body, needles):
    assert_error(search(api_client, body), 400, "invalid_request", *needles)


@pytest.mark.django_db
def test_several_invalid_fields_are_all_named(api_client):
    error = assert_error(search(api_client, {"query": "", "top_k": 0}), 400, "invalid_request", "query:", "top_k:")
    assert set(error["details"]) == {"query", "top_k"}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("filters", "needles", "details"),
    [
        ({"colour": "red"}, ["unknown field 'colour'"], {"field": "colour"}),
        (
            {"or": [{"doc_type": "md"}, {"author": "me"}]},
            ["filters.or[1]", "unknown field 'author'"],
            {"field": "author"},
        ),
        (
            {"doc_type": {"like": "m%"}},
            ["filters.doc_type", "unknown operator 'like'"],
            {"field": "doc_type", "operator": "like"},
        ),
        (
            {"metadata.region": {"between": [1, 2]}},
            ["unknown operator 'between'"],
            {"field": "metadata.region", "operator": "between"},
        ),
        ({"tags": {"eq": "x"}}, ["unknown operator 'eq' for 'tags'"], {"field": "tags", "operator": "eq"}),
    ],
)
def test_unknown_filter_fields_and_operators_are_named(api_client, filters, needles, details):
    error = assert_error(search(api_client, {"query": "x", "filters": filters}), 400, "invalid_filter", *needles)
    assert error["details"] == details


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("filters", "needle"),
    [
        (["doc_type", "md"], "filters: expected a JSON object, got array"),
        ({"doc_id": "7"}, "filters.doc_id.eq: expected an integer, got string"),
        ({"doc_type": {"in": []}}, "filters.doc_type.in: expected a non-empty list"),
        ({"created_at": {"gte": "yesterday"}}, "'yesterday' is not an ISO date or datetime"),
        ({"metadata.region": {"exists": "yes"}}, "expected true or false"),
        ({"metadata.": 1}, "invalid metadata key"),
        ({"or": []}, "filters.or: expected a non-empty list"),
        ({"doc_type": {}}, "empty operator object"),
    ],
)
def test_ill_typed_filters_are_400(api_client, filters, needle):
    assert_error(search(api_client, {"query": "x", "filters": filters}), 400, "invalid_filter", needle)


@pytest.mark.django_db
def test_wrong_content_type_is_415(api_client):
    response = api_client.post(URL, data='{"query": "x"}', content_type="text/plain")
    assert_error(response, 415, "unsupported_media_type", 'Unsupported media type "text/plain"')
    form = api_client.post(URL, data={"query": "x"}, format="multipart")
    assert_error(form, 415, "unsupported_media_type", "multipart/form-data")


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["get", "put", "patch", "delete"])
def test_other_methods_are_405(api_client, method):
    response = getattr(api_client, method)(URL)
    assert_error(response, 405, "method_not_allowed", f'Method "{method.upper()}" not allowed')
    assert "POST" in response["Allow"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path", ["/api/v1/retrieval/keyword", "/api/v2/retrieval/vector", "/api/", "/api/v1/retrieval/vector/extra"]
)
def test_unknown_api_path_is_a_json_404(api_client, path):
    response = api_client.post(path, data="{}", content_type="application/json")
    assert_error(response, 404, "not_found", "No such endpoint")
    assert_error(api_client.get(path), 404, "not_found", "No such endpoint")


def test_unknown_api_path_is_a_json_404_without_a_key(client):
    assert_error(client.get("/api/nope"), 404, "not_found", "No such endpoint")


@pytest.mark.slow
@pytest.mark.django_db
def test_query_is_trimmed_before_embedding(corpus):
    padded = ok_results(search(corpus.client, {"query": "   " + JUPITER + "\n\t"}))
    exact = ok_results(search(corpus.client, {"query": JUPITER}))
    assert [(h["chunk_id"], h["score"]) for h in padded] == [(h["chunk_id"], h["score"]) for h in exact]


@pytest.mark.slow
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("filters", "needle"),
    [
        ({"doc_type": "t\u0000xt"}, "filters.doc_type.eq: strings may not contain NUL"),
        ({"metadata.region": "e\u0000u"}, "filters.metadata.region.eq: strings may not contain NUL"),
        ({"metadata.reg\u0000ion": {"exists": True}}, "invalid metadata key"),
        ({"tags": "poli\u0000cy"}, "filters.tags.contains: strings may not contain NUL"),
        ({"doc_type": {"in": ["md", "t\u0000xt"]}}, "strings may not contain NUL"),
    ],
    ids=["doc_type", "metadata-value", "metadata-key", "tags", "doc_type-in"],
)
def test_nul_character_in_a_filter_string_is_400_not_500(corpus, filters, needle):
    # The tenant has chunks, so an unchecked NUL would reach PostgreSQL (which rejects it: a 500).
    client = Client(raise_request_exception=False)
    response = client.post(
        URL,
        data=json.dumps({"query": "refund", "filters": filters}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {create_api_key(tenant=corpus.tenant).raw_key}",
    )
    assert_error(response, 400, "invalid_filter", needle)


@pytest.mark.slow
@pytest.mark.django_db
@pytest.mark.parametrize(
    "filters",
    [{"metadata.priority": {"gt": "abc"}}, {"metadata.region": {"lt": 5}}],
    ids=["number-field-vs-string", "string-field-vs-number"],
)
def test_range_filter_never_matches_values_of_another_json_type(corpus, filters):
    # priority is a number and region a string in every document that has them; jsonb itself orders
    # every string below every number, so only a same-type guard keeps these empty.
    assert ok_results(search(corpus.client, {"query": "refund", "filters": filters})) == []


@pytest.mark.slow
@pytest.mark.django_db
def test_string_range_filter_compares_lexically(corpus):
    results = ok_results(search(corpus.client, {"query": "refund", "filters": {"metadata.region": {"gte": "f"}}}))
    assert set(file_names(results)) == {"jupiter.txt", "kettle.txt"}  # "intl" and "us" sort after "f"; "eu" before
