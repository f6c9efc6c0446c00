"""Inputs refused, not swallowed (issue 51): one naming rule for knowledge bases, API keys and tenants;
language tags; paging values; a charset that is no encoding; a query string that is not UTF-8."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from core.names import InvalidName, checked_name, name_problem
from knowledge.models import KnowledgeBase
from tenants.models import ApiKey, Tenant
from tenants.services import create_api_key, create_tenant
from tests.conftest import client_for
from tests.factories import KnowledgeBaseFactory, give_unlimited_rate_tier

KBS = "/api/v1/knowledge-bases"
CONTROL_NAME = "\u0001\u0092U\u0007"


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        (CONTROL_NAME, "U+0001"),
        ("kb\u0092", "U+0092"),  # a C1 control character
        ("a\u200bb", "U+200B"),  # zero width space: invisible
        ("   ", "blank"),
        ("x" * 101, "at most 100"),
        (17, "string"),
    ],
)
def test_the_naming_rule_refuses_what_is_not_printable_trimmed_and_bounded(name, problem):
    assert problem in name_problem(name)
    with pytest.raises(InvalidName):
        checked_name(name)


def test_the_naming_rule_keeps_printable_unicode_trimmed():
    assert checked_name("  蜀香小馆 kitchen  ") == "蜀香小馆 kitchen"
    assert checked_name("x" * 100) == "x" * 100
    assert checked_name("", allow_blank=True) == ""


@pytest.mark.django_db
def test_a_kb_name_with_control_characters_is_a_400_and_nothing_is_stored(tenant):
    writer = client_for(tenant, "ingest", "search")
    response = writer.post(KBS, {"name": CONTROL_NAME}, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and "U+0001" in error["message"]
    assert not KnowledgeBase.objects.filter(tenant=tenant).exists()


@pytest.mark.django_db
def test_every_service_applies_the_same_rule(tenant):
    for create in (
        lambda: create_tenant(CONTROL_NAME),
        lambda: create_api_key(tenant=tenant, name=CONTROL_NAME),
    ):
        with pytest.raises(InvalidName):
            create()
    assert create_tenant("  spaced  ").name == "spaced"
    assert create_api_key(tenant=tenant, name="").api_key.name == ""
    assert not ApiKey.objects.filter(name=CONTROL_NAME).exists() and not Tenant.objects.filter(name=CONTROL_NAME)
    with pytest.raises(CommandError, match="U\\+0001"):
        call_command("create_tenant", CONTROL_NAME, stdout=io.StringIO())


@pytest.mark.django_db
@pytest.mark.parametrize("languages", [["\u0007x*", "12345678"], ["12345678"], ["en_US"], [""]])
def test_languages_that_are_no_language_tag_are_a_400(tenant, languages):
    response = client_for(tenant, "ingest").post(KBS, {"name": "kb", "languages": languages}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "invalid_request" and "languages" in response.json()["error"]["details"]


@pytest.mark.django_db
def test_language_tags_are_accepted(tenant, embedder):
    response = client_for(tenant, "ingest").post(
        KBS, {"name": "kb", "languages": ["zh", "en", "zh-Hant", "pt-BR"]}, format="json"
    )
    assert response.status_code == 201, response.content
    assert response.json()["languages"] == ["zh", "en", "zh-Hant", "pt-BR"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "query", ["offset=null", "limit=true", "limit=0", "offset=-1", "limit=1.5", f"offset={10**19}"]
)
def test_paging_values_that_are_no_integer_in_range_are_a_400(tenant, query):
    KnowledgeBaseFactory(tenant=tenant)
    response = client_for(tenant).get(f"{KBS}?{query}")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and query.split("=")[0] in error["details"]


@pytest.mark.django_db
def test_paging_values_in_range_page(tenant):
    give_unlimited_rate_tier(tenant)
    for number in range(3):
        KnowledgeBaseFactory(tenant=tenant, name=f"kb-{number}")
    client = client_for(tenant)
    page = client.get(f"{KBS}?limit=2&offset=1").json()
    assert page["count"] == 3 and [kb["name"] for kb in page["results"]] == ["kb-1", "kb-2"]
    assert len(client.get(f"{KBS}?limit=5000").json()["results"]) == 3  # above the maximum counts as it
    assert len(client.get(f"{KBS}?limit={10**25}").json()["results"]) == 3


@pytest.mark.django_db
def test_a_charset_that_is_no_encoding_is_a_400(tenant):
    client = Client(HTTP_AUTHORIZATION=client_for(tenant, "ingest")._credentials["HTTP_AUTHORIZATION"])
    for charset in ("bogus-enc", "rot13"):
        response = client.generic("POST", KBS, b'{"name": "kb"}', content_type=f"application/json; charset={charset}")
        assert response.status_code == 400, response.content
        assert response.json()["error"]["code"] == "unsupported_charset"
    assert not KnowledgeBase.objects.filter(tenant=tenant).exists()


@pytest.mark.django_db
def test_a_known_charset_is_read(tenant, embedder):
    client = Client(HTTP_AUTHORIZATION=client_for(tenant, "ingest")._credentials["HTTP_AUTHORIZATION"])
    body = '{"name": "kb"}'.encode("utf-16")
    response = client.generic("POST", KBS, body, content_type="application/json; charset=utf-16")
    assert response.status_code == 201, response.content


@pytest.mark.django_db
@pytest.mark.parametrize("query", ["x=%ff", "limit=%c3%28", "q=%e9t%e9"])
def test_a_query_string_that_is_not_utf8_is_a_400(tenant, query):
    response = client_for(tenant).get(f"{KBS}?{query}")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "malformed_query_string"
    assert response.json()["error"]["request_id"] == response["X-Request-ID"]


@pytest.mark.django_db
def test_a_utf8_query_string_is_read(tenant):
    assert client_for(tenant).get(f"{KBS}?q=%E8%9C%80&limit=2").status_code == 200
