"""The OpenAPI document (/api/schema/), Swagger UI served offline (/api/docs/), and a schemathesis
fuzz of every API operation against that document: no generated request may cause a 5xx."""

from __future__ import annotations

import io
import re

import pytest
import schemathesis
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance

from engines.metering import KINDS
from tenants.services import create_api_key, create_tenant
from tests.retrieval.api_corpus import ingest, write_files

SEARCH_PATHS = [f"/api/v1/retrieval/{name}" for name in ("vector", "bm25", "hybrid", "search")]
ERROR_STATUSES = ["400", "401", "403", "404", "409", "413", "415", "422", "429", "503"]


@pytest.fixture
def openapi(client) -> dict:
    response = client.get("/api/schema/", {"format": "json"})
    assert response.status_code == 200, response.content
    return response.json()


def test_schema_validates_without_warnings():
    """drf-spectacular's own check: a valid OpenAPI 3 document and nothing it had to guess."""
    call_command("spectacular", "--validate", "--fail-on-warn", stdout=io.StringIO())


def test_every_search_endpoint_documents_body_examples_and_every_error(openapi):
    assert openapi["openapi"].startswith("3.")
    for path in SEARCH_PATHS:
        operation = openapi["paths"][path]["post"]
        body = operation["requestBody"]["content"]["application/json"]
        assert body["schema"]["$ref"].endswith("SearchInput"), path
        assert body["examples"], path
        ok = operation["responses"]["200"]["content"]["application/json"]
        assert ok["schema"]["$ref"] == "#/components/schemas/SearchOutput"
        assert {"Results", "Degraded:KeywordIndexDown"} <= set(ok["examples"])
        for status in ERROR_STATUSES:
            error = operation["responses"][status]["content"]["application/json"]
            assert error["schema"]["$ref"] == "#/components/schemas/ErrorOutput", (path, status)
            for example in error["examples"].values():
                assert set(example["value"]["error"]) == {"code", "message", "request_id"}
        assert operation["security"] == [{"BearerApiKey": []}, {"ApiKeyHeader": []}]
        headers = {parameter["name"] for parameter in operation["parameters"] if parameter["in"] == "header"}
        assert headers == {"Idempotency-Key", "X-Request-ID"}
    assert "mode" in openapi["components"]["schemas"]["ModeSearchInput"]["properties"]


def test_error_examples_use_the_codes_the_service_answers(openapi):
    responses = openapi["paths"]["/api/v1/retrieval/hybrid"]["post"]["responses"]
    examples = {status: responses[status]["content"]["application/json"]["examples"] for status in ERROR_STATUSES}
    codes = {
        status: {example["value"]["error"]["code"] for example in examples[status].values()} for status in examples
    }
    assert codes["400"] == {
        "invalid_request", "invalid_filter", "malformed_json", "invalid_idempotency_key", "query_vector_mismatch",
        "query_vector_not_applicable", "unsupported_charset", "malformed_query_string",
    }  # fmt: skip
    assert codes["401"] == {"missing_api_key"} and codes["403"] == {"invalid_api_key", "insufficient_scope"}
    assert codes["409"] == {"idempotency_in_flight"} and codes["422"] == {"idempotency_key_reused"}
    assert codes["503"] == {
        "embedder_unavailable",
        "lexical_index_unavailable",
        "vector_index_unavailable",
        "graph_unavailable",
        "reranker_unavailable",
        "rate_limiter_unavailable",
    }


def test_dify_endpoint_documents_difys_body_and_error_shapes(openapi):
    operation = openapi["paths"]["/api/v1/dify/retrieval"]["post"]
    body = operation["requestBody"]["content"]["application/json"]
    assert body["schema"]["$ref"].endswith("DifyRetrievalInput") and body["examples"]
    assert operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "DifyRetrievalOutput"
    )
    codes = set()
    for status in ("400", "403", "404", "429", "503"):
        error = operation["responses"][status]["content"]["application/json"]
        assert error["schema"]["$ref"].endswith("DifyErrorOutput"), status
        codes |= {example["value"]["error_code"] for example in error["examples"].values()}
    assert {1001, 2001} <= codes
    assert operation["security"] == [{"DifyBearerApiKey": []}]
    schemas = openapi["components"]["schemas"]
    assert "notes" in schemas["DifyRetrievalOutput"]["properties"]
    assert schemas["MetadataConditionInput"]["properties"]["conditions"]["nullable"] is True
    assert "/api/v1/dify//retrieval" not in openapi["paths"]  # the trailing-slash route is the same operation


def test_security_schemes_are_a_bearer_key_or_the_x_api_key_header(openapi):
    schemes = openapi["components"]["securitySchemes"]
    assert (schemes["BearerApiKey"]["type"], schemes["BearerApiKey"]["scheme"]) == ("http", "bearer")
    assert schemes["ApiKeyHeader"]["in"] == "header" and schemes["ApiKeyHeader"]["name"] == "X-API-Key"


def test_stats_endpoint_is_documented(openapi):
    operation = openapi["paths"]["/api/v1/stats"]["get"]
    assert operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("StatsOutput")
    assert {"401", "403"} <= set(operation["responses"])


def test_the_cost_objects_are_documented_with_every_unit(openapi):
    schemas = openapi["components"]["schemas"]
    assert set(schemas["CostUnitsOutput"]["properties"]) == set(KINDS)
    assert schemas["CostUnitsOutput"]["properties"]["cpu_ms"]["type"] == "number"
    for output in ("SearchOutput", "GlobalGraphOutput"):
        assert schemas[output]["properties"]["cost"]["allOf"][0]["$ref"].endswith("/CostOutput")
    assert "cost" in schemas["StatsOutput"]["properties"]


def test_parent_child_chunks_are_documented_on_hits_and_knowledge_bases(openapi):
    schemas = openapi["components"]["schemas"]
    hit = schemas["SearchHitOutput"]["properties"]
    assert hit["parent_id"]["nullable"] and hit["children"]["nullable"]
    assert hit["children"]["items"]["$ref"].endswith("/MatchedChildOutput")
    assert set(schemas["MatchedChildOutput"]["properties"]) == {"chunk_id", "ordinal", "retrievers"}
    for name in ("KnowledgeBaseInput", "VersionInput", "KnowledgeBaseOutput", "VersionOutput"):
        properties = schemas[name]["properties"]
        assert {"chunking", "parent_chunk_size"} <= set(properties), name
        (reference,) = re.findall(r"#/components/schemas/(\w+)", str(properties["chunking"]))
        assert schemas[reference]["enum"] == ["plain", "parent_child"], name


def test_the_version_changes_are_documented(openapi):
    for change in ("activate", "retire"):
        (path,) = [path for path in openapi["paths"] if path.endswith(f"/versions/{{number}}/{change}")]
        operation = openapi["paths"][path]["post"]
        assert "requestBody" not in operation
        assert operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("VersionOutput")
        assert {"404", "409"} <= set(operation["responses"])


def test_schema_is_served_without_an_api_key_and_as_yaml_by_default(client):
    response = client.get("/api/schema/")
    assert response.status_code == 200
    assert response.content.startswith(b"openapi: 3.")


def test_swagger_ui_is_served_from_local_static_files(client):
    response = client.get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert any("swagger-ui-bundle.js" in asset for asset in assets), assets
    for asset in assets:
        assert not asset.startswith(("http:", "https:", "//")), f"{asset} would be fetched from the internet"
        if asset.startswith("/static/"):
            assert finders.find(asset.removeprefix("/static/")), f"{asset} is not shipped"
    assert "/api/schema/" in html


# === fuzzing with schemathesis =====================================================================


@pytest.fixture
def fuzz_api_key(keep_test_transaction, tmp_path, embedder) -> str:
    """A tenant with a tiny knowledge base, so generated searches reach every retriever."""
    tenant = create_tenant("fuzz-tenant")
    folder = write_files(
        tmp_path / "fuzz",
        {
            "returns.md": ("# Returns\n\nUnopened items may be returned within 30 days for a full refund.", None),
            "kettle.txt": ("The PPR-9087 kettle boils 1.7 litres of water in four minutes.", {"tags": ["product"]}),
        },
    )
    ingest(folder, tenant, "fuzz")
    return create_api_key(tenant=tenant).raw_key


# Loaded from the running app (no database needed to build it); one test per API operation.
schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", get_wsgi_application()).include(
    path_regex=r"^/api/v1/"
)


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_no_generated_request_is_a_server_error(case, fuzz_api_key):
    case.call_and_validate(headers={"Authorization": f"Bearer {fuzz_api_key}"}, checks=[not_a_server_error])


# Requests the schema calls valid: only positive cases. Besides the library's default statuses, a 422 is
# expected: generated cases reuse an Idempotency-Key with another body, which the schema documents as 422.
valid_requests = schemathesis.openapi.from_wsgi("/api/schema/?format=json", get_wsgi_application()).include(
    path_regex=r"^/api/v1/"
)
valid_requests.config.generation.modes = [GenerationMode.POSITIVE]
valid_requests.config.checks.positive_data_acceptance.expected_statuses = [
    "2xx", "401", "403", "404", "409", "422", "429"
]  # fmt: skip


@pytest.mark.slow
@valid_requests.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_no_request_the_schema_calls_valid_is_rejected(case, fuzz_api_key):
    if isinstance(case.body, dict):
        # Stated as objects only (OpenAPI 3.0 cannot state their grammars: filter keys; a Dify condition's
        # value typed by its operator): tests/retrieval/test_filters.py and tests/retrieval/test_dify.py
        case.body.pop("filters", None)
        case.body.pop("metadata_condition", None)
        # Valid only with the searched KB's model and dimension, which no schema can state: test_views_query_vector.py
        case.body.pop("query_vector", None)
    response = case.call(headers={"Authorization": f"Bearer {fuzz_api_key}"})
    if response.status_code == 422:
        assert response.json()["error"]["code"] == "idempotency_key_reused", response.text
    case.validate_response(response, checks=[positive_data_acceptance])


def test_the_schema_states_the_rules_the_service_enforces(openapi):
    search = openapi["components"]["schemas"]["SearchInput"]["properties"]
    query = re.compile(search["query"]["pattern"])
    # The Dify endpoint's query follows the same rules.
    assert openapi["components"]["schemas"]["DifyRetrievalInput"]["properties"]["query"]["pattern"] == query.pattern
    assert search["query"]["minLength"] == 1 and query.fullmatch("  kettle ")
    assert not query.fullmatch(" \t ") and not query.fullmatch("a\x00")
    weights = search["weights"]
    assert set(weights["properties"]) == {"vector", "bm25", "graph"} and weights["additionalProperties"] is False
    assert weights["not"]["properties"]["vector"] == {"enum": [0]}
    assert "raised to top_k" in search["candidates"]["description"] and search["filters"]["type"] == "object"
    parameters = openapi["paths"]["/api/v1/retrieval/search"]["post"]["parameters"]
    header = next(parameter for parameter in parameters if parameter["name"] == "Idempotency-Key")
    key = re.compile(header["schema"]["pattern"])
    assert key.fullmatch("retry-1.a:b_c") and not key.fullmatch("a b") and "422" in header["description"]


def test_the_schemas_fixes_of_issue_51(openapi):
    """What a full schemathesis run found: the version actions' 400 (an invalid Idempotency-Key), the lists'
    400 (paging values), Dify's typed condition name and optional body (its older registration probe)."""
    paths = openapi["paths"]
    for action in ("activate", "retire"):
        assert "400" in paths[f"/api/v1/knowledge-bases/{{kb_id}}/versions/{{number}}/{action}"]["post"]["responses"]
    assert "400" in paths["/api/v1/knowledge-bases"]["get"]["responses"]
    dify = paths["/api/v1/dify/retrieval"]["post"]
    assert dify["requestBody"]["required"] is False
    condition = openapi["components"]["schemas"]["ConditionInput"]["properties"]["name"]
    assert [option["type"] for option in condition["oneOf"]] == ["string", "array"]
    example = paths["/api/v1/retrieval/vector"]["post"]["requestBody"]["content"]["application/json"]["examples"]
    [own] = [item["value"] for name, item in example.items() if "query_vector" in item["value"]]
    assert len(own["query_vector"]["values"]) == 384  # the documented model's dimension: the example is accepted
