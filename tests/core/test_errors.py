"""Django's own error views (handler400/403): JSON on ``/api/`` paths, Django's pages elsewhere.

Over a real server: tests/retrieval_site/test_asgi.py (a Host not allowed, a truncated body)."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import PermissionDenied, SuspiciousOperation
from django.db import IntegrityError, transaction

from core.errors import api_exception_handler, json_400, json_403
from tenants.models import Tenant


@pytest.mark.parametrize(
    ("handler", "exception", "status", "code"),
    [(json_400, SuspiciousOperation("bad"), 400, "bad_request"), (json_403, PermissionDenied(), 403, "forbidden")],
)
def test_api_paths_get_the_json_error_shape(rf, handler, exception, status, code):
    response = handler(rf.get("/api/v1/stats"), exception)
    assert response.status_code == status and response["Content-Type"] == "application/json"
    assert json.loads(response.content)["error"]["code"] == code

    page = handler(rf.get("/admin/"), exception)
    assert page.status_code == status and page["Content-Type"].startswith("text/html")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "headers", "status", "code"),
    [
        ("/api/v1/stats?format=xml", {}, 404, "not_found"),  # DRF raises Django's Http404 for an unknown format
        ("/api/v1/stats", {"HTTP_ACCEPT": "text/html"}, 406, "not_acceptable"),
    ],
)
def test_content_negotiation_failures_carry_their_own_code_and_a_message(api_client, path, headers, status, code):
    response = api_client.get(path, **headers)
    assert response.status_code == status
    error = json.loads(response.content)["error"]
    assert error["code"] == code and error["message"]


@pytest.mark.django_db
def test_a_unique_violation_no_service_mapped_is_a_409_conflict_not_a_500(rf, tenant):
    """The handler's safety net; each service maps its own constraints to its own code first."""
    with pytest.raises(IntegrityError) as violation, transaction.atomic():
        Tenant.objects.create(name=tenant.name)
    response = api_exception_handler(violation.value, {"request": rf.post("/api/v1/knowledge-bases")})
    assert response.status_code == 409
    assert response.data["error"]["code"] == "conflict" and response.data["error"]["message"]
