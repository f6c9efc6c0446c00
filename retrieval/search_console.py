"""The console's retrieval testing: a form over the API's search options, the same cached search the
API runs, and every hit explained (per-leg ranks and raw scores, the variant that matched, the
matched terms highlighted by the analyzer). Registered as admin views by ``retrieval.admin``."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.db.models import QuerySet
from django.http import Http404, QueryDict
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.datastructures import MultiValueDict

from core.errors import DomainError
from engines.analysis import Analyzer
from knowledge.models import KnowledgeBase
from knowledge.search_settings import MAX_CANDIDATES
from knowledge.selectors.search import analyzer_for_tenant
from retrieval.cache import CachedSearch, cached_search
from retrieval.errors import InvalidFilter
from retrieval.expansion import ExpansionOptions
from retrieval.filters import compile_filters
from retrieval.graph_serializers import MAX_COMMUNITY_LEVEL
from retrieval.highlight import highlight, meaningful_terms
from retrieval.models import GRADES
from retrieval.query_sets import document_key, grades_for
from retrieval.selectors import recent_runs
from retrieval.serializers import MAX_HOPS, MAX_QUERY_CHARS
from retrieval.services.community_search import GlobalGraphRequest, global_graph_search
from retrieval.services.planning import DENSE_SKIPPED_LANGUAGE, DENSE_WEIGHTED_LANGUAGE
from retrieval.services.run_history import record_run
from retrieval.types import MODES, RETRIEVERS, SearchRequest, SearchResponse
from tenants.models import Tenant
from tenants.principals import InvalidPrincipals, clean_principals, reader_of
from tenants.requests import ConsoleRequest
from tenants.selectors import tenants_visible_to


class SearchSettingsForm(forms.Form):
    """How to rank: the API's options (``retrieval.serializers.SearchInput``); blank takes the default."""

    mode = forms.ChoiceField(choices=[(mode, mode) for mode in MODES], initial="hybrid")
    top_k = forms.IntegerField(min_value=1, max_value=100, initial=10)
    weight_vector = forms.FloatField(min_value=0, max_value=100, required=False, help_text="blank: default")
    weight_bm25 = forms.FloatField(min_value=0, max_value=100, required=False, help_text="blank: default")
    weight_graph = forms.FloatField(
        min_value=0, max_value=100, required=False, help_text="blank: default; in hybrid, above 0 adds the graph leg"
    )
    hops = forms.IntegerField(
        min_value=0, max_value=MAX_HOPS, required=False, help_text="graph leg: blank: default (GRAPH_HOPS)"
    )
    candidates = forms.IntegerField(min_value=1, max_value=MAX_CANDIDATES, required=False, help_text="per leg")
    rrf_k = forms.IntegerField(min_value=1, max_value=1000, required=False, label="RRF k")
    expand_synonyms = forms.BooleanField(required=False, initial=True, label="synonyms")
    expand_spelling = forms.BooleanField(required=False, label="spelling")
    expand_llm = forms.BooleanField(required=False, label="LLM rewriting")
    max_expansions = forms.IntegerField(min_value=0, max_value=10, initial=3)
    rerank = forms.BooleanField(required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        top_k, candidates = data.get("top_k"), data.get("candidates")
        if top_k and candidates and candidates < top_k:
            self.add_error("candidates", f"must be at least top k ({top_k})")
        return data

    def search_options(self) -> dict[str, Any]:
        """The ``SearchRequest`` fields these settings decide."""
        data = self.cleaned_data
        weights = {name: data[f"weight_{name}"] for name in RETRIEVERS if data[f"weight_{name}"] is not None}
        return {
            "mode": data["mode"],
            "top_k": data["top_k"],
            "weights": weights or None,
            "candidates": data["candidates"],
            "rrf_k": data["rrf_k"],
            "hops": data["hops"],
            "rerank": data["rerank"],
            "expand": ExpansionOptions(
                synonyms=data["expand_synonyms"],
                spelling=data["expand_spelling"],
                llm=data["expand_llm"],
                max_expansions=data["max_expansions"],
            ),
        }


class RetrievalTestForm(SearchSettingsForm):
    """What to search (tenant, query, knowledge bases, filters) and how to rank it."""

    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), empty_label=None)
    query = forms.CharField(max_length=MAX_QUERY_CHARS, widget=forms.TextInput(attrs={"size": 80, "autofocus": True}))
    knowledge_bases = forms.ModelMultipleChoiceField(
        queryset=KnowledgeBase.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="none ticked: all of the tenant's",
    )
    filters = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60, "placeholder": '{"doc_type": {"in": ["pdf", "md"]}}'}),
        help_text="JSON, as in the API",
    )

    graph_scope = forms.ChoiceField(
        choices=[("local", "local: passages"), ("global", "global: communities")],
        initial="local",
        required=False,
        label="graph scope",
        help_text="graph mode: global ranks the knowledge bases' communities by their summaries",
    )
    level = forms.IntegerField(
        min_value=0, max_value=MAX_COMMUNITY_LEVEL, required=False, help_text="graph global: community level, blank: 0"
    )

    read_as = forms.CharField(
        required=False,
        label="read as",
        widget=forms.TextInput(attrs={"size": 60, "placeholder": "user:alice group:hr"}),
        help_text="the reader's principals, separated by spaces; blank: everyone ('*') only (docs/permissions.md)",
    )

    field_order = ["tenant", "query", "knowledge_bases", "filters", "read_as"]

    def __init__(self, *args: Any, tenants: QuerySet[Tenant], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        kbs = offer_knowledge_bases(self, tenants, "knowledge_bases")
        # Validation takes any visible tenant's KB (``clean`` names a foreign one); the boxes offered are the
        # chosen tenant's only (choosing another hides them until the form runs for it: _tenant_switch.html).
        chosen = self.chosen_tenant_id(tenants)
        self.fields["knowledge_bases"].widget.choices = [
            (kb.pk, f"{kb.tenant.name} / {kb.name}") for kb in kbs if kb.tenant_id == chosen
        ]
        if len(tenants) == 1:
            self.fields["tenant"].widget = forms.HiddenInput()
            self.fields["tenant"].initial = tenants[0].pk

    def chosen_tenant_id(self, tenants: QuerySet[Tenant]) -> int | None:
        """The tenant the form is for: the submitted one, else the link's, else the first visible."""
        given = str(self.data.get("tenant") if self.is_bound else self.initial.get("tenant"))
        ids = [tenant.pk for tenant in tenants]
        if given.isdigit() and int(given) in ids:
            return int(given)
        return ids[0] if ids else None

    def clean_filters(self) -> dict[str, Any] | None:
        text = self.cleaned_data["filters"].strip()
        if not text:
            return None
        try:
            filters: dict[str, Any] | None = json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"not valid JSON: {exc}") from None
        try:
            compile_filters(filters)
        except InvalidFilter as exc:
            raise forms.ValidationError(exc.message) from None
        return filters

    def clean_read_as(self) -> tuple[str, ...]:
        try:
            return reader_of(clean_principals(self.cleaned_data["read_as"].split(), where="read as"))
        except InvalidPrincipals as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        tenant, kbs = data.get("tenant"), data.get("knowledge_bases") or []
        foreign = [kb.name for kb in kbs if kb.tenant_id != tenant.pk] if tenant else []
        if foreign and tenant:
            self.add_error("knowledge_bases", f"not knowledge bases of {tenant.name}: {', '.join(foreign)}")
        if data.get("graph_scope") == "global" and data.get("mode") != "graph":
            self.add_error("graph_scope", "the global scope is a graph search: choose mode graph")
        return data

    def is_global(self) -> bool:
        return self.cleaned_data.get("graph_scope") == "global"

    def global_request(self) -> GlobalGraphRequest:
        data = self.cleaned_data
        kb_ids = [kb.pk for kb in data["knowledge_bases"]]
        level = data["level"] or 0
        return GlobalGraphRequest(
            data["query"], data["top_k"], kb_ids or None, level, data["filters"], reader=data["read_as"]
        )

    def search_request(self) -> SearchRequest:
        data = self.cleaned_data
        kb_ids = [kb.pk for kb in data["knowledge_bases"]]
        return SearchRequest(
            query=data["query"],
            kb_ids=kb_ids or None,
            filters=data["filters"],
            reader=data["read_as"],
            **self.search_options(),
        )

    def submitted(self) -> dict[str, list[str]]:
        """The submitted values of this form's fields, as a run's ``params`` keeps them."""
        data = self.data
        assert isinstance(data, MultiValueDict)  # a bound form's POST (or a run's params)
        return {name: data.getlist(name) for name in self.fields if name in data}


# --- presentation ---------------------------------------------------------------------------------


def explain(tenant: Tenant, response: SearchResponse) -> list[dict[str, Any]]:
    """The hits as the page shows them: the passage escaped with the terms of any query variant used
    marked, and per leg its rank, raw score and a bar relative to the best score of that leg here."""
    analyzer = analyzer_for_tenant(tenant.pk)
    query_tokens = {
        token
        for query in response.queries
        for term in meaningful_terms(analyzer, query["text"])
        for token in term.tokens
    }
    best = {
        leg: max((hit.retrievers[leg]["score"] for hit in response.results if leg in hit.retrievers), default=0)
        for leg in RETRIEVERS
    }
    return [
        {
            "hit": hit,
            "passage": highlight(analyzer, hit.content, query_tokens),
            "metadata": json.dumps(hit.metadata, ensure_ascii=False, sort_keys=True),
            "legs": [
                {
                    "name": leg,
                    **hit.retrievers[leg],
                    "bar": round(100 * max(hit.retrievers[leg]["score"], 0) / best[leg]) if best[leg] > 0 else 0,
                }
                for leg in RETRIEVERS
                if leg in hit.retrievers
            ],
        }
        for hit in response.results
    ]


def curation_links(tenant: Tenant, query: str, analyzer: Analyzer | None = None) -> list[dict[str, Any]]:
    """Per term of the query as written (the spans the tenant's analyzer makes tokens of): prefilled
    admin forms adding it as a protected term or starting a synonym rule (saving either expires the
    tenant's cached answers). ``analyzer``: the tenant's, when the caller has it already."""
    analyzer = analyzer or analyzer_for_tenant(tenant.pk)
    surfaces = dict.fromkeys(term.surface(query) for term in meaningful_terms(analyzer, query))
    return [
        {
            "term": surface,
            "protect": _prefilled("admin:knowledge_dictionaryterm_add", tenant=tenant.pk, value=surface),
            "synonym": _prefilled("admin:knowledge_synonym_add", tenant=tenant.pk, terms=surface),
        }
        for surface in surfaces
    ]


def movements(before: SearchResponse, after: SearchResponse) -> tuple[dict[int, str], set[int]]:
    """How each hit of ``after`` moved from ``before`` (chunk id -> "new", "=", "↑n" or "↓n"), and the
    chunk ids of ``before`` that ``after`` dropped."""
    ranks = {hit.chunk_id: hit.rank for hit in before.results}
    moved = {}
    for hit in after.results:
        was = ranks.get(hit.chunk_id)
        if was is None:
            moved[hit.chunk_id] = "new"
        elif was == hit.rank:
            moved[hit.chunk_id] = "="
        else:
            moved[hit.chunk_id] = f"↑{was - hit.rank}" if was > hit.rank else f"↓{hit.rank - was}"
    return moved, set(ranks) - {hit.chunk_id for hit in after.results}


def _prefilled(url_name: str, **initial: Any) -> str:
    return f"{reverse(url_name)}?{urlencode(initial, doseq=True)}"


def testing_link(tenant_id: int, query: str, mode: str, kb_ids: list[int]) -> str:
    """The retrieval testing page with this search in its form, ready to run (``prefilled_test``)."""
    return _prefilled("admin:retrieval_retrievalrun_changelist", tenant=tenant_id, query=query, mode=mode,
                      knowledge_bases=kb_ids)  # fmt: skip


def prefilled_test(params: QueryDict) -> dict[str, Any]:
    """The testing form's initial values from a link's query string (``testing_link``); the form
    checks them when it is submitted."""
    initial = {name: params.get(name) for name in ("tenant", "query", "mode") if params.get(name)}
    kb_ids = [value for value in params.getlist("knowledge_bases") if value.isdigit()]
    return {**initial, "knowledge_bases": kb_ids} if kb_ids else initial


GRADE_LABELS = list(zip(GRADES, ("not relevant", "relevant", "highly relevant"), strict=True))


def mark_judgments(tenant: Tenant, query: str, rows: list[dict[str, Any]]) -> None:
    """Each hit's document as a judgment names it, and its grade for this query in its KB's set (None:
    not judged), so the testing page shows what is judged and judges with one click."""
    kb_ids = {row["hit"].kb_id for row in rows}
    grades = {kb.pk: grades_for(kb, query) for kb in KnowledgeBase.objects.filter(tenant=tenant, pk__in=kb_ids)}
    for row in rows:
        row["document"] = document_key(row["hit"].source_uri)
        row["grade"] = grades.get(row["hit"].kb_id, {}).get(row["document"])


DENSE_LANGUAGE_CODES = (DENSE_SKIPPED_LANGUAGE, DENSE_WEIGHTED_LANGUAGE)


def dense_language_note(response: SearchResponse) -> str | None:
    """The message of the search's notice that the dense leg was skipped (or turned down) because no
    searched model covers the query's language, if it has one (``retrieval.services.planning.retriever_weights``),
    found by its code."""
    return next((n["message"] for n in response.notices if n["code"] in DENSE_LANGUAGE_CODES), None)


# --- views ----------------------------------------------------------------------------------------


def testing_view(request: ConsoleRequest, context: dict[str, Any]) -> TemplateResponse:
    """Run a retrieval test (POST), re-run one from the history (POST ``rerun``), or show the form."""
    tenants = tenants_visible_to(request.user)
    data: MultiValueDict[str, Any] | None = request.POST if request.method == "POST" else None
    if data is not None and "rerun" in data:
        rerun = str(data["rerun"])
        if not rerun.isdigit():
            raise Http404("no such run")
        run = get_object_or_404(request.user.retrieval_runs, pk=int(rerun))
        data = MultiValueDict(run.params)
    form = RetrievalTestForm(data, tenants=tenants, initial=prefilled_test(request.GET))
    if data is not None and form.is_valid() and form.is_global():
        context.update(form=form, communities=_run_global(request, form), runs=recent_runs(request.user),
                       has_tenants=True, compare_url=reverse("admin:retrieval_retrievalrun_compare"))  # fmt: skip
        return TemplateResponse(request, "admin/retrieval/testing.html", context)
    searched = _run(request, form) if data is not None else None
    outcome: dict[str, Any] | None = None
    if searched is not None:
        tenant = form.cleaned_data["tenant"]
        record_run(request.user, tenant, form.submitted(), searched.response)
        outcome = _outcome_context(tenant, searched)
        outcome["curation"] = curation_links(tenant, form.cleaned_data["query"])
        mark_judgments(tenant, form.cleaned_data["query"], outcome["hits"])
        outcome.update(query=form.cleaned_data["query"], judge_url=reverse("admin:retrieval_retrievalrun_judge"),
                       grades=GRADE_LABELS)  # fmt: skip
    context.update(
        form=form, outcome=outcome, runs=recent_runs(request.user), has_tenants=tenants.exists(),
        compare_url=reverse("admin:retrieval_retrievalrun_compare"),
    )  # fmt: skip
    return TemplateResponse(request, "admin/retrieval/testing.html", context)


def compare_view(request: ConsoleRequest, context: dict[str, Any]) -> TemplateResponse:
    """One query under two settings side by side; the right column marks how each hit moved."""
    tenants = tenants_visible_to(request.user)
    data = request.POST if request.method == "POST" else None
    form = RetrievalTestForm(data, tenants=tenants, initial=prefilled_test(request.GET))
    other = SearchSettingsForm(data, prefix="b", initial={"mode": request.GET.get("b-mode") or "bm25"})
    sides = None
    left = _run(request, form) if data is not None else None
    if left is not None and other.is_valid():
        right = _run(request, form, replace(form.search_request(), **other.search_options()))
        if right is not None:
            tenant = form.cleaned_data["tenant"]
            moved, dropped = movements(left.response, right.response)
            sides = [_outcome_context(tenant, left), _outcome_context(tenant, right)]
            for row in sides[0]["hits"]:
                row["moved"] = "dropped" if row["hit"].chunk_id in dropped else ""
            for row in sides[1]["hits"]:
                row["moved"] = moved[row["hit"].chunk_id]
    context.update(form=form, other=other, sides=sides, has_tenants=tenants.exists())
    return TemplateResponse(request, "admin/retrieval/compare.html", context)


def _run(
    request: ConsoleRequest, form: RetrievalTestForm, search_request: SearchRequest | None = None
) -> CachedSearch | None:
    """The cached search of the form's request (or ``search_request``), or None with the reason shown:
    invalid input stays on the form, a failed search (all legs down) becomes a form error."""
    if not form.is_valid():
        return None
    try:
        return cached_search(form.cleaned_data["tenant"], search_request or form.search_request(), logged=False)
    except DomainError as exc:
        form.add_error(None, f"The search failed: {exc.message}")
        messages.error(request, "The search failed; see the message above the form.")
        return None


def _run_global(request: ConsoleRequest, form: RetrievalTestForm) -> dict[str, Any] | None:
    """The communities a global graph search ranks (as the API answers them; not kept in the history),
    or None with the reason shown as a form error."""
    try:
        return global_graph_search(form.cleaned_data["tenant"], form.global_request()).as_dict()
    except DomainError as exc:
        form.add_error(None, f"The search failed: {exc.message}")
        messages.error(request, "The search failed; see the message above the form.")
        return None


def _outcome_context(tenant: Tenant, outcome: CachedSearch) -> dict[str, Any]:
    response = outcome.response
    return {
        "response": response,
        "cached": outcome.cached,
        "semantic": outcome.semantic,  # a semantic hit: the cached query reused and its cosine
        "hits": explain(tenant, response),
        "timings": sorted(response.timings_ms.items(), key=lambda item: item[0] == "total"),
        "dense_language": dense_language_note(response),
    }


def offer_knowledge_bases(form: forms.Form, tenants: QuerySet[Tenant], kb_field_name: str) -> QuerySet[KnowledgeBase]:
    """A console form's tenant box offers ``tenants`` and its KB box (``kb_field_name``) their KBs, each
    labelled "tenant / KB"; returns the KBs offered."""
    tenant_field, kb_field = form.fields["tenant"], form.fields[kb_field_name]
    assert isinstance(tenant_field, forms.ModelChoiceField) and isinstance(kb_field, forms.ModelChoiceField)
    tenant_field.queryset = tenants
    kb_field.queryset = kbs = (
        KnowledgeBase.objects.filter(tenant__in=tenants).select_related("tenant").order_by("tenant__name", "name")
    )
    kb_field.label_from_instance = lambda kb: f"{kb.tenant.name} / {kb.name}"  # type: ignore[method-assign, assignment]  # an instance's label, as Django allows (its stubs: a method)
    return kbs
