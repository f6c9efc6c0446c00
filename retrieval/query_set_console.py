"""The console's query sets and evaluation runs: judging a hit from the retrieval testing page (one
click), adding a query from the search analytics, a KB's set with its import and export, its runs, and
one run's page with its charts. Registered as admin views by ``retrieval.admin``."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import Http404, HttpResponse, HttpResponseRedirect, JsonResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import SafeString

from core.charts import Series, bar_chart, line_chart
from core.errors import DomainError
from knowledge.models import KnowledgeBase, KnowledgeBaseVersion
from knowledge.search_settings import FUSIONS
from knowledge.versions import activate_version
from retrieval import query_sets
from retrieval.evaluation import gate, kb_runs
from retrieval.models import EvaluationRun
from retrieval.types import MODES
from tenants.requests import ConsoleRequest
from tenants.selectors import tenants_visible_to


def visible_kbs(user: User) -> QuerySet[KnowledgeBase]:
    return KnowledgeBase.objects.filter(tenant__in=tenants_visible_to(user)).select_related("tenant")


def _kb(request: ConsoleRequest, value: str | None) -> KnowledgeBase:
    """A KB the user may see; any other id is a 404, as a missing one."""
    digits = str(value or "")
    if not digits.isdigit():
        raise Http404("no such knowledge base")
    kb = visible_kbs(request.user).filter(pk=int(digits)).first()
    if kb is None:
        raise Http404("no such knowledge base")
    return kb


def query_set_url(kb_id: int) -> str:
    return f"{reverse('admin:retrieval_retrievalrun_query_set')}?{urlencode({'kb': kb_id})}"


def _back(request: ConsoleRequest, fallback: str) -> HttpResponseRedirect:
    target = request.POST.get("next") or ""
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = fallback
    return HttpResponseRedirect(target)


def judge_view(request: ConsoleRequest) -> HttpResponse:
    """POST kb, query, document, grade: the grade joins the KB's set. JSON for the testing page's
    buttons (``Accept: application/json``); else back to the KB's set."""
    if request.method != "POST":
        return HttpResponse(status=405)
    kb = _kb(request, request.POST.get("kb"))
    wants_json = "application/json" in request.headers.get("Accept", "")
    try:
        grade = int(request.POST.get("grade", ""))
        judged = query_sets.judge(
            kb, request.POST.get("query", ""), {request.POST.get("document", ""): grade}, "console"
        )
    except (ValueError, DomainError) as exc:
        message = exc.message if isinstance(exc, DomainError) else "a grade is 0, 1 or 2"
        if wants_json:
            return JsonResponse({"error": message}, status=400)
        messages.error(request, message)
        return HttpResponseRedirect(query_set_url(kb.pk))
    if wants_json:
        return JsonResponse({"query_id": judged.pk, "document": request.POST["document"].strip(), "grade": grade})
    messages.success(request, f"Judged {request.POST['document']} {grade} for “{judged.query}”.")
    return _back(request, query_set_url(kb.pk))


def add_query_view(request: ConsoleRequest) -> HttpResponse:
    """POST kb, query (from the search analytics): the query joins the KB's set, to be judged."""
    if request.method != "POST":
        return HttpResponse(status=405)
    kb = _kb(request, request.POST.get("kb"))
    try:
        judged, created = query_sets.add_query(kb, request.POST.get("query", ""), "analytics")
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(
            request, f"“{judged.query}” {'added to' if created else 'is already in'} the query set of {kb.name}."
        )
    return _back(request, query_set_url(kb.pk))


def query_set_view(request: ConsoleRequest, context: dict[str, Any]) -> HttpResponse:
    """GET ?kb=: the KB's set, runs and export links (``export=csv|beir``); POST: import a file, remove a
    query, or start an evaluation run."""
    kbs = visible_kbs(request.user).order_by("tenant__name", "name")
    kb = (
        _kb(request, request.GET.get("kb") or request.POST.get("kb"))
        if (request.GET.get("kb") or request.POST.get("kb"))
        else None
    )
    if kb is not None and request.method == "POST":
        return _query_set_post(request, kb)
    if kb is not None and request.GET.get("export") in ("csv", "beir"):
        return _export(kb, request.GET["export"])
    if kb is not None:
        history = kb_runs.ndcg_history(kb)
        context.update(
            kb=kb,
            queries=list(query_sets.judged_queries_of(kb)),
            runs=list(kb_runs.runs_of(kb)[:50]),
            history_chart=_history_chart(history) if history else None,
            threshold=kb_runs.relevance_threshold_of(kb),
            modes=MODES,
            fusions=FUSIONS,
            versions=_versions(kb),
            scorable=kb.versions.filter(status__in=kb_runs.SCORABLE).order_by("-number"),
        )
    context.update(kbs=kbs)
    return TemplateResponse(request, "admin/retrieval/query_set.html", context)


def _versions(kb: KnowledgeBase) -> list[dict[str, Any]]:
    """The KB's ready versions (not active), each with its latest comparison with the active one."""
    ready = kb.versions.filter(status=KnowledgeBaseVersion.Status.READY).order_by("-number")
    return [{"version": version, "gate": gate.latest_gate(kb, version.number)} for version in ready]


def _export(kb: KnowledgeBase, kind: str) -> HttpResponse:
    if kind == "csv":
        response = HttpResponse(query_sets.export_csv(kb), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{kb.name}-query-set.csv"'
    else:
        response = HttpResponse(query_sets.export_beir(kb), content_type="application/zip")
        response["Content-Disposition"] = f'attachment; filename="{kb.name}-query-set.zip"'
    return response


def _query_set_post(request: ConsoleRequest, kb: KnowledgeBase) -> HttpResponse:
    here = query_set_url(kb.pk)
    try:
        if "remove" in request.POST:
            query_sets.remove_query(kb, int(request.POST["remove"]) if request.POST["remove"].isdigit() else 0)
            messages.success(request, "Query removed from the set.")
        elif "import" in request.POST:
            upload = request.FILES.get("file")
            if upload is None:
                messages.error(request, "Choose a .zip (BEIR layout) or .csv file to import.")
            else:
                counts = query_sets.import_query_set(kb, upload.name or "", upload.read())
                messages.success(request, f"Imported {counts.queries} queries and {counts.judgments} judgments.")
        elif "gate" in request.POST or "switch" in request.POST:
            number = request.POST.get("gate") or request.POST.get("switch") or ""
            version = kb.versions.filter(number=int(number) if number.isdigit() else 0).first()
            if version is None:
                raise Http404("no such version")
            if "gate" in request.POST:
                record = gate.check_version(kb, version, activate=False)
                (messages.success if record.passes else messages.warning)(
                    request,
                    f"Version {version.number} against version {record.active_number}: {record.report['reason']}",
                )
            else:
                activate_version(version)
                messages.success(request, f"Searches of {kb.name} now read version {version.number}.")
        elif "evaluate" in request.POST:
            settings = {
                "mode": request.POST.get("mode") or "hybrid",
                "fusion": request.POST.get("fusion") or None,
                "rerank": request.POST.get("rerank") == "on",
                "version": int(request.POST["version"]) if request.POST.get("version", "").isdigit() else None,
            }
            run = kb_runs.start_evaluation(kb, settings)
            return HttpResponseRedirect(reverse("admin:retrieval_retrievalrun_evaluation", args=[run.pk]))
    except DomainError as exc:
        messages.error(request, exc.message)
    return HttpResponseRedirect(here)


def evaluation_status_view(request: ConsoleRequest, run_id: int) -> JsonResponse:
    """A run's progress, polled by its page while it runs."""
    run = _run(request, run_id)
    finished = run.status in (EvaluationRun.Status.DONE, EvaluationRun.Status.FAILED)
    return JsonResponse({"status": run.status, "done": run.done, "total": run.total, "finished": finished,
                         "error": run.error})  # fmt: skip


def _run(request: ConsoleRequest, run_id: int) -> EvaluationRun:
    run = (
        EvaluationRun.objects.filter(pk=run_id, knowledge_base__tenant__in=tenants_visible_to(request.user))
        .select_related("knowledge_base__tenant")
        .first()
    )
    if run is None:
        raise Http404("no such evaluation run")
    return run


def evaluation_view(request: ConsoleRequest, run_id: int, context: dict[str, Any]) -> HttpResponse:
    """One run: its figures, the KB's nDCG@10 history, wins and losses against another run (``?against=``,
    by default the run before it) and the relevance-threshold curve with the recommended threshold."""
    run = _run(request, run_id)
    kb = run.knowledge_base
    if request.method == "POST" and "make_default" in request.POST:
        try:
            threshold = kb_runs.make_threshold_default(run)
        except DomainError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(request, f"{kb.name}'s default score_threshold is now {threshold}: Dify's retrieval "
                             "applies it when Dify sends none.")  # fmt: skip
        return HttpResponseRedirect(request.get_full_path())
    others = [other for other in kb_runs.runs_of(kb).filter(status=EvaluationRun.Status.DONE) if other.pk != run.pk]
    against = request.GET.get("against", "")
    base = next((other for other in others if str(other.pk) == against), None)
    if base is None and not against:
        base = next((other for other in others if other.created_at < run.created_at), None)
    rows = kb_runs.wins_and_losses(base, run) if base is not None and run.status == EvaluationRun.Status.DONE else []
    curve = (run.summary or {}).get("relevance_threshold") or {}
    context.update(
        run=run,
        kb=kb,
        others=others,
        base=base,
        comparison=rows,
        wins=sum(row["delta"] > 0 for row in rows),
        losses=sum(row["delta"] < 0 for row in rows),
        comparison_chart=_comparison_chart(kb, run, base, rows) if rows and base is not None else None,
        history_chart=_history_chart(kb_runs.ndcg_history(kb), current=run.pk),
        curve=curve,
        curve_chart=_curve_chart(curve) if curve.get("curve") else None,
        status_url=reverse("admin:retrieval_retrievalrun_evaluation_status", args=[run.pk]),
        query_set_url=query_set_url(kb.pk),
        kb_default=(kb.search_settings or {}).get("score_threshold"),
    )
    return TemplateResponse(request, "admin/retrieval/evaluation_run.html", context)


# --- charts ---------------------------------------------------------------------------------------


def _history_chart(runs: list[EvaluationRun], current: int | None = None) -> SafeString:
    points = [(float(run.pk), float(run.summary["metrics"]["ndcg@10"])) for run in runs if run.summary]
    ticks = [(float(run.pk), f"#{run.pk}") for run in runs if run.summary]
    return line_chart(
        [Series("nDCG@10", points, "ndcg")], chart_id="ndcg-history", title="nDCG@10 of the KB's runs",
        x_label="run", x_ticks=ticks,
        marker=(float(current), f"run #{current}") if current is not None and any(p[0] == current for p in points) else None,
    )  # fmt: skip


def _compare_link(kb: KnowledgeBase, query: str, run: EvaluationRun, base: EvaluationRun) -> str:
    """The side-by-side compare page, prefilled with the query and the two runs' modes."""
    params = {"tenant": kb.tenant_id, "query": query, "knowledge_bases": kb.pk, "mode": base.settings.get("mode", "hybrid"),
              "b-mode": run.settings.get("mode", "hybrid")}  # fmt: skip
    return f"{reverse('admin:retrieval_retrievalrun_compare')}?{urlencode(params)}"


def _comparison_chart(
    kb: KnowledgeBase, run: EvaluationRun, base: EvaluationRun, rows: list[dict[str, Any]]
) -> SafeString | None:
    changed = [row for row in rows if row["delta"]]
    bars = [(row["query"], row["delta"], _compare_link(kb, row["query"], run, base)) for row in changed]
    for row in rows:
        row["compare"] = _compare_link(kb, row["query"], run, base)
    return bar_chart(
        bars, chart_id="wins-losses", title=f"nDCG@10 per query: run #{run.pk} against run #{base.pk}"
    ) if bars else None  # fmt: skip


def _curve_chart(curve: dict[str, Any]) -> SafeString:
    points = curve["curve"]
    kept = Series("judged relevant kept", [(p["threshold"], p["relevant_kept"]) for p in points], "kept")
    dropped = Series("others dropped", [(p["threshold"], p["others_dropped"]) for p in points], "dropped")
    recommended = curve.get("threshold_keeping_90")
    return line_chart(
        [kept, dropped], chart_id="threshold-curve", title="relevance threshold: judged relevant kept, others dropped",
        x_label="relevance threshold", x_ticks=[(t / 4, f"{t / 4:g}") for t in range(5)],
        marker=(recommended, f"keeps 90 %: {recommended}") if recommended is not None else None,
    )  # fmt: skip
