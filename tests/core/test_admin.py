"""The admin's shared blocks (core.admin): a form that loses a uniqueness race answers with its reason."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages
from django.forms.models import BaseModelForm

from knowledge.models import DictionaryTerm, KnowledgeBase
from tenants.models import RateTier
from tests.concurrency import race
from tests.factories import KnowledgeBaseFactory

pytestmark = pytest.mark.django_db(transaction=True)  # the winner commits on a connection of its own


def lose_the_race(monkeypatch, write_winner) -> None:
    """The form passes its own uniqueness check, then another save commits the same row before this one
    (on a thread and connection of its own): what two admins saving at once do."""

    def validate_unique(form) -> None:
        (outcome,) = race(write_winner)
        assert not isinstance(outcome, Exception), outcome

    monkeypatch.setattr(BaseModelForm, "validate_unique", validate_unique)


def refusal(response) -> str:
    assert response.status_code == 302, response.content  # back to the form, not a 500
    assert response["Location"] == response.wsgi_request.get_full_path()
    return " ".join(str(message) for message in get_messages(response.wsgi_request))


def test_a_rate_tier_saved_twice_at_once_is_refused_once(admin_client, monkeypatch):
    lose_the_race(monkeypatch, lambda: RateTier.objects.create(name="gold", requests_per_window=60))
    response = admin_client.post(
        "/admin/tenants/ratetier/add/", {"name": "gold", "requests_per_window": 120, "endpoint_limits": "{}"}
    )
    assert "Not saved: another save broke the uniqueness rule tenants_ratetier_name_key" in refusal(response)
    assert list(RateTier.objects.filter(name="gold").values_list("requests_per_window", flat=True)) == [60]


def test_a_protected_term_added_twice_at_once_is_refused_once(admin_client, tenant, monkeypatch):
    lose_the_race(monkeypatch, lambda: DictionaryTerm.objects.create(tenant=tenant, value="sky-10023908"))
    response = admin_client.post(
        "/admin/knowledge/dictionaryterm/add/",
        {"tenant": tenant.pk, "kind": DictionaryTerm.Kind.TERM, "value": "sky-10023908", "note": "second"},
    )
    assert "uniqueness rule unique_dictionary_term" in refusal(response)
    assert list(DictionaryTerm.objects.filter(tenant=tenant).values_list("note", flat=True)) == [""]


@pytest.mark.slow
def test_a_knowledge_base_named_twice_at_once_gets_the_services_conflict(admin_client, tenant, monkeypatch, embedder):
    lose_the_race(monkeypatch, lambda: KnowledgeBaseFactory(tenant=tenant, name="handbook"))
    response = admin_client.post(
        "/admin/knowledge/knowledgebase/add/",
        {"tenant": tenant.pk, "name": "handbook", "description": "", "embedding_model": "", "chunk_size": "",
         "chunk_overlap": "", "languages": ""},
    )  # fmt: skip
    said = refusal(response)
    assert "Not saved:" in said and "handbook" in said
    assert KnowledgeBase.objects.filter(tenant=tenant, name="handbook").count() == 1
