"""Synonyms and protected terms in bulk: plans with per-line errors, applying, exporting back."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from knowledge import vocabulary
from knowledge.errors import VocabularyChanged
from knowledge.models import DictionaryTerm, Synonym
from tenants.models import Tenant
from tests.concurrency import race

pytestmark = pytest.mark.django_db

SOLR = """# returns
退货, 退换货
過敏 => 饮食禁忌, allergy

a =>\x20
single
"""


def test_solr_lines_become_groups_and_rules_and_bad_lines_name_their_number(tenant):
    plan = vocabulary.plan_import(tenant, vocabulary.SYNONYMS_SOLR, SOLR)
    assert [(row.kind, row.terms, row.replacements) for row in plan.add] == [
        ("equivalent", ["退货", "退换货"], []),
        ("explicit", ["過敏"], ["饮食禁忌", "allergy"]),
    ]
    assert [number for number, _ in plan.errors] == [5, 6]
    assert "needs replacements" in plan.errors[0][1] and "at least two terms" in plan.errors[1][1]
    assert not Synonym.objects.exists()  # a plan writes nothing


def test_csv_updates_what_exists_keeps_what_is_unchanged_and_flags_repeats(tenant):
    Synonym.objects.create(tenant=tenant, terms=["tv", "television"], weight=0.5)
    Synonym.objects.create(tenant=tenant, terms=["phone", "mobile"], weight=0.5)
    text = (
        "terms,replacements,weight,active\n"
        '"television, tv",,0.8,true\n'  # same group (any order): weight updated
        '"phone, mobile",,,\n'  # unchanged
        '"laptop",notebook,0.3,no\n'  # a new one-way rule, inactive
        '"mobile, phone",,,\n'  # repeats line 3
        "x,y,heavy,\n"
        "x,y,2,\n"
    )
    plan = vocabulary.plan_import(tenant, vocabulary.SYNONYMS_CSV, text)
    assert [(row.terms, row.weight) for row in plan.update] == [(["tv", "television"], 0.8)]
    assert [row.terms for row in plan.unchanged] == [["phone", "mobile"]]
    assert [(row.kind, row.replacements, row.is_active) for row in plan.add] == [("explicit", ["notebook"], False)]
    assert plan.errors == [(5, "repeats line 3"), (6, "weight must be a number, not 'heavy'"),
                           (7, "weight: must be in (0, 1]")]  # fmt: skip


def test_applying_writes_the_plan_and_expires_cached_answers_once(tenant):
    stamp = Tenant.objects.get(pk=tenant.pk).vocabulary_stamp
    text = "value,kind,note\nPPR-9087,,battery\nORD-\\d{4},pattern,\n"
    plan = vocabulary.plan_import(tenant, vocabulary.TERMS_CSV, text)
    with CaptureQueriesContext(connection) as writes:
        vocabulary.apply_import(tenant, plan)
    tenant_updates = f'UPDATE "{Tenant._meta.db_table}"'
    assert len([query for query in writes.captured_queries if query["sql"].startswith(tenant_updates)]) == 1
    assert sorted(DictionaryTerm.objects.filter(tenant=tenant).values_list("kind", "value", "note")) == [
        ("pattern", "ORD-\\d{4}", ""), ("term", "PPR-9087", "battery"),
    ]  # fmt: skip
    assert Tenant.objects.get(pk=tenant.pk).vocabulary_stamp != stamp
    again = vocabulary.plan_import(tenant, vocabulary.TERMS_CSV, "value,kind,note\nPPR-9087,term,battery\n")
    assert (len(again.add), len(again.update), len(again.unchanged)) == (0, 0, 1)


def test_a_plan_with_errors_is_not_applied(tenant):
    plan = vocabulary.plan_import(tenant, vocabulary.TERMS_CSV, "value,kind\nA(,pattern\nok,term\n")
    assert plan.errors and "not a valid regular expression" in plan.errors[0][1]
    with pytest.raises(ValueError, match="a plan with errors is not applied"):
        vocabulary.apply_import(tenant, plan)
    assert not DictionaryTerm.objects.exists()


def test_a_csv_without_the_header_is_one_error(tenant):
    plan = vocabulary.plan_import(tenant, vocabulary.SYNONYMS_CSV, "a,b\n")
    assert plan.errors == [(1, "the header must name the columns terms, replacements, weight, active")]


def test_exports_read_back_as_the_same_rules(tenant):
    solr = "退货, 退换货\nlaptop => notebook\n"
    vocabulary.apply_import(tenant, vocabulary.plan_import(tenant, vocabulary.SYNONYMS_SOLR, solr))
    rules = Synonym.objects.filter(tenant=tenant)
    for file_format, text in [
        (vocabulary.SYNONYMS_CSV, vocabulary.export_synonyms_csv(rules)),
        (vocabulary.SYNONYMS_SOLR, vocabulary.export_synonyms_solr(rules)),
    ]:
        plan = vocabulary.plan_import(tenant, file_format, text)
        assert (len(plan.add), len(plan.update), len(plan.unchanged), plan.errors) == (0, 0, 2, [])


@pytest.mark.django_db(transaction=True)
def test_of_two_imports_planned_together_and_applied_at_once_one_writes_and_one_conflicts(tenant):
    text = "value,kind,note\nPPR-9087,,battery\n"
    plans = [vocabulary.plan_import(tenant, vocabulary.TERMS_CSV, text) for _ in range(2)]  # both see no term
    outcomes = race(*[lambda plan=plan: vocabulary.apply_import(tenant, plan) for plan in plans])
    [conflict] = [outcome for outcome in outcomes if outcome is not None]
    assert isinstance(conflict, VocabularyChanged), conflict
    assert (conflict.status_code, conflict.code) == (409, "vocabulary_changed")
    assert list(DictionaryTerm.objects.filter(tenant=tenant).values_list("value", flat=True)) == ["PPR-9087"]
