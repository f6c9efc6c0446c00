"""``/api/v1/knowledge-bases/{kb_id}/query-set`` and ``…/evaluations``: a KB's judged query set (read,
judge, import, export) and its evaluation runs (start one, follow it, read it). Thin: the work is in
``retrieval.query_sets`` and ``retrieval.evaluation.kb_runs``; reads need ``search`` or ``ingest``,
writes ``ingest`` (``KnowledgeApiViewSet``)."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.parsers import JSONParser, MultiPartParser
from rest_framework.response import Response

from core.errors import NotFoundError
from core.schema import IDEMPOTENCY_KEY_HEADER, ErrorOutput, error_responses
from knowledge.models import KnowledgeBase
from knowledge.selectors.api import knowledge_base_of, version_of
from knowledge.views import KnowledgeApiViewSet
from retrieval import query_sets
from retrieval.errors import InvalidQuerySet
from retrieval.evaluation import gate, kb_runs
from retrieval.models import EvaluationRun, JudgedQuery, VersionGate
from tenants.requests import TenantRequest

EMPTY_QUERY_SET = OpenApiResponse(
    response=ErrorOutput,
    description="No query of the set has a relevant judgment (`empty_query_set`); or a request with the same "
    "`Idempotency-Key` is still running (`idempotency_in_flight`).",
)
# A bad grade, file or setting of a query set or run: `invalid_query_set` (beside `invalid_request`).


VERSION_NOT_READY = OpenApiResponse(
    response=ErrorOutput,
    description="The version is not ready (`version_conflict`); or a request with the same `Idempotency-Key` is "
    "still running (`idempotency_in_flight`).",
)


class VersionGateNotFound(NotFoundError):
    code = "version_gate_not_found"


class JudgedQueryOutput(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    query = serializers.CharField()
    origin = serializers.CharField()
    judgments = serializers.SerializerMethodField(help_text="document (its file name) -> grade 0-2")

    def get_judgments(self, judged: JudgedQuery) -> dict[str, int]:
        return {judgment.document: judgment.grade for judgment in judged.judgments.all()}


class QuerySetOutput(serializers.Serializer[Any]):
    queries = JudgedQueryOutput(many=True)


class JudgeInput(serializers.Serializer[Any]):
    query = serializers.CharField(max_length=query_sets.MAX_QUERY_CHARS)
    judgments = serializers.DictField(
        child=serializers.IntegerField(min_value=0, max_value=2),
        help_text="document (its file name, as a hit's source_uri ends) -> grade: 0 not relevant, 1 relevant, "
        "2 highly relevant; empty: the query joins the set unjudged",
    )


class ImportInput(serializers.Serializer[Any]):
    file = serializers.FileField(help_text="a .zip in the BEIR layout (queries.jsonl + qrels/*.tsv) or a .csv")


class ImportOutput(serializers.Serializer[Any]):
    queries = serializers.IntegerField()
    judgments = serializers.IntegerField()


class EvaluationInput(serializers.Serializer[Any]):
    version = serializers.IntegerField(
        min_value=1, required=False, allow_null=True, help_text="a ready or retired version's number; none: the active"
    )
    mode = serializers.ChoiceField(choices=["vector", "bm25", "hybrid", "graph"], default="hybrid")
    fusion = serializers.ChoiceField(choices=["rrf", "relevance", "minmax"], required=False, allow_null=True)
    weights = serializers.DictField(child=serializers.FloatField(min_value=0, max_value=100), required=False)
    rerank = serializers.BooleanField(default=False)
    candidates = serializers.IntegerField(min_value=100, max_value=200, required=False)
    rrf_k = serializers.IntegerField(min_value=1, max_value=1000, required=False)


class EvaluationOutput(serializers.ModelSerializer[Any]):
    metrics = serializers.SerializerMethodField()
    latency_ms = serializers.SerializerMethodField()
    kb_threshold = serializers.SerializerMethodField()
    recommended_threshold = serializers.SerializerMethodField()

    class Meta:
        model = EvaluationRun
        fields = ["id", "version_number", "revision", "settings", "status", "done", "total", "metrics",
                  "latency_ms", "kb_threshold", "recommended_threshold", "per_query", "error", "created_at",
                  "finished_at"]  # fmt: skip

    def get_metrics(self, run: EvaluationRun) -> dict[str, float]:
        return (run.summary or {}).get("metrics") or {}

    def get_latency_ms(self, run: EvaluationRun) -> dict[str, float | None]:
        return (run.summary or {}).get("latency_ms") or {}

    def get_kb_threshold(self, run: EvaluationRun) -> dict[str, Any] | None:
        """The KB's relevance threshold and the share of judged-relevant top-10 hits it keeps."""
        return (run.summary or {}).get("kb_threshold")

    def get_recommended_threshold(self, run: EvaluationRun) -> float | None:
        """The highest relevance threshold keeping 90 % of the judged-relevant top-10 hits."""
        return ((run.summary or {}).get("relevance_threshold") or {}).get("threshold_keeping_90")


class ThresholdOutput(serializers.Serializer[Any]):
    score_threshold = serializers.FloatField(help_text="the KB's default score_threshold now")


def _kb(request: TenantRequest, kb_id: int) -> KnowledgeBase:
    """The caller's KB ``kb_id``: one outside a KB-limited key's list is as missing as another tenant's."""
    return knowledge_base_of(request.tenant, kb_id, request.auth.reachable_kb_ids)


class QuerySetViewSet(KnowledgeApiViewSet):
    """``/api/v1/knowledge-bases/{kb_id}/query-set``."""

    parser_classes = [JSONParser, MultiPartParser]
    pagination_class = None

    @extend_schema(
        summary="The knowledge base's judged query set",
        description="JSON by default; `export=csv` a CSV (query_id, query, document, grade), `export=beir` a zip "
        "of queries.jsonl and qrels/test.tsv (what `manage.py evaluate --tenant` reads).",
        parameters=[OpenApiParameter("export", str, enum=["csv", "beir"], required=False)],
        responses={
            (200, "application/json"): QuerySetOutput,
            (200, "text/csv"): OpenApiTypes.STR,  # export=csv
            (200, "application/zip"): OpenApiTypes.BINARY,  # export=beir
            **error_responses(401, 403, 404, 429),
        },
    )
    def whole_set(self, request: TenantRequest, kb_id: int) -> Response | HttpResponse:
        """One object (not DRF's list action, which the schema would describe as an array)."""
        kb = _kb(request, kb_id)
        export = request.query_params.get("export")
        if export == "csv":
            response = HttpResponse(query_sets.export_csv(kb), content_type="text/csv; charset=utf-8")
            response["Content-Disposition"] = f'attachment; filename="{kb.name}-query-set.csv"'
            return response
        if export == "beir":
            response = HttpResponse(query_sets.export_beir(kb), content_type="application/zip")
            response["Content-Disposition"] = f'attachment; filename="{kb.name}-query-set.zip"'
            return response
        if export is not None:
            raise InvalidQuerySet("export is csv or beir", details={"field": "export"})
        return Response(QuerySetOutput({"queries": query_sets.judged_queries_of(kb)}).data)

    @extend_schema(
        summary="Judge documents for a query",
        description="The query joins the set if it is not in it; a document graded again takes the new grade.",
        request=JudgeInput,
        parameters=[IDEMPOTENCY_KEY_HEADER],
        responses={200: JudgedQueryOutput, **error_responses(400, 401, 403, 404, 422, 429)},
    )
    def judge(self, request: TenantRequest, kb_id: int) -> Response:
        kb = _kb(request, kb_id)
        params = JudgeInput(data=request.data)
        params.is_valid(raise_exception=True)
        judged = query_sets.judge(kb, params.validated_data["query"], params.validated_data["judgments"], "api")
        return Response(JudgedQueryOutput(query_sets.judged_queries_of(kb).get(pk=judged.pk)).data)

    @extend_schema(
        summary="Import judged queries",
        description="Merges a BEIR zip or a CSV (columns query, document, grade) into the set, all or nothing.",
        request={"multipart/form-data": ImportInput},
        parameters=[IDEMPOTENCY_KEY_HEADER],
        responses={200: ImportOutput, **error_responses(400, 401, 403, 404, 422, 429)},
    )
    def import_file(self, request: TenantRequest, kb_id: int) -> Response:
        kb = _kb(request, kb_id)
        params = ImportInput(data=request.data)
        params.is_valid(raise_exception=True)
        upload = params.validated_data["file"]
        counts = query_sets.import_query_set(kb, upload.name, upload.read())
        return Response(ImportOutput(counts.as_dict()).data)


class EvaluationViewSet(KnowledgeApiViewSet):
    """``/api/v1/knowledge-bases/{kb_id}/evaluations``."""

    serializer_class = EvaluationOutput  # what the schema's paginated list reads

    @extend_schema(
        summary="The knowledge base's evaluation runs, newest first",
        responses={200: EvaluationOutput(many=True), **error_responses(401, 403, 404, 429)},
    )
    def list(self, request: TenantRequest, kb_id: int) -> Response:
        return self.paginated(kb_runs.runs_of(_kb(request, kb_id)), EvaluationOutput)

    @extend_schema(
        summary="One evaluation run, with its progress (done/total) while it runs",
        responses={200: EvaluationOutput, **error_responses(401, 403, 404, 429)},
    )
    def retrieve(self, request: TenantRequest, kb_id: int, pk: int) -> Response:
        return Response(EvaluationOutput(kb_runs.run_of(_kb(request, kb_id), pk)).data)

    @extend_schema(
        summary="Make the run's recommended threshold the KB's default score_threshold",
        description="The highest relevance threshold keeping 90 % of the run's judged-relevant top-10 hits becomes "
        "the KB's `score_threshold`, which Dify's retrieval applies when Dify sends none (0.0). Needs `ingest`.",
        request=None,
        parameters=[IDEMPOTENCY_KEY_HEADER],
        responses={200: ThresholdOutput, **error_responses(400, 401, 403, 404, 422, 429)},
    )
    def threshold(self, request: TenantRequest, kb_id: int, pk: int) -> Response:
        run = kb_runs.run_of(_kb(request, kb_id), pk)
        return Response(ThresholdOutput({"score_threshold": kb_runs.make_threshold_default(run)}).data)

    @extend_schema(
        summary="Evaluate a version (the active one by default) on the query set",
        description="A Celery task runs every judged query with a relevant judgment through the search with these "
        "settings (blank: the KB's), as `manage.py evaluate` does: nDCG@10, recall@10, MRR@10, p50 latency, and "
        "the share of judged-relevant top-10 hits kept at the KB's relevance threshold. 409 `empty_query_set` "
        "when no query has a relevant judgment.",
        request=EvaluationInput,
        parameters=[IDEMPOTENCY_KEY_HEADER],
        responses={202: EvaluationOutput, **error_responses(400, 401, 403, 404, 422, 429), 409: EMPTY_QUERY_SET},
    )
    def create(self, request: TenantRequest, kb_id: int) -> Response:
        kb = _kb(request, kb_id)
        params = EvaluationInput(data=request.data)
        params.is_valid(raise_exception=True)
        run = kb_runs.start_evaluation(kb, dict(params.validated_data))
        return Response(EvaluationOutput(run).data, status=status.HTTP_202_ACCEPTED)


class VersionGateOutput(serializers.ModelSerializer[Any]):
    class Meta:
        model = VersionGate
        fields = ["version_number", "active_number", "passes", "activated", "report", "created_at"]


class VersionGateViewSet(KnowledgeApiViewSet):
    """``/api/v1/knowledge-bases/{kb_id}/versions/{number}/gate``: a version against the active one."""

    pagination_class = None

    @extend_schema(
        summary="The latest comparison of a version with the active one",
        description='What `activate: "gated"` decided on, or the last `POST`: nDCG@10 of both versions on the '
        "KB's query set, the per-query losses, the overlap of their top 10s on recent real queries.",
        responses={200: VersionGateOutput, **error_responses(401, 403, 404, 429)},
    )
    def retrieve(self, request: TenantRequest, kb_id: int, number: int) -> Response:
        kb = _kb(request, kb_id)
        version_of(kb, number, counted=False)
        record = gate.latest_gate(kb, number)
        if record is None:
            raise VersionGateNotFound(f"version {number} has not been compared yet: POST to compare it")
        return Response(VersionGateOutput(record).data)

    @extend_schema(
        summary="Compare a ready version with the active one now (no switch)",
        description="Runs the KB's query set on both versions (and recent queries for the overlap), keeps the "
        "report and returns it; switch with `POST .../versions/{number}/activate`. Needs `ingest`.",
        request=None,
        parameters=[IDEMPOTENCY_KEY_HEADER],
        responses={200: VersionGateOutput, **error_responses(400, 401, 403, 404, 422, 429), 409: VERSION_NOT_READY},
    )
    def create(self, request: TenantRequest, kb_id: int, number: int) -> Response:
        kb = _kb(request, kb_id)
        record = gate.check_version(kb, version_of(kb, number, counted=False), activate=False)
        return Response(VersionGateOutput(record).data)
