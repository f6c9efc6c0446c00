"""Input and output shapes of the knowledge endpoints."""

from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.files.uploadedfile import UploadedFile
from django_celery_beat.validators import crontab_validator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.fields import NameField
from engines.metering import KINDS
from knowledge.models import PARENT_CHILD, PLAIN, Document, KnowledgeBaseVersion, KnowledgeSource, SourceRun
from knowledge.selectors.api import latest_runs, source_schedule
from tenants.principals import MAX_PRINCIPAL, MAX_PRINCIPALS, PRINCIPAL_PATTERN, InvalidPrincipals, clean_principals

# A BCP 47 language tag's common shapes: a 2-3 letter language, then subtags (script, region, variant).
LANGUAGE_TAG = r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{1,8})*$"


class DocumentCountsOutput(serializers.Serializer[Any]):
    total = serializers.IntegerField()
    by_status = serializers.DictField(child=serializers.IntegerField(), help_text="every document status, 0 when none")


class QueryCountsOutput(serializers.Serializer[Any]):
    served = serializers.IntegerField(help_text="successful searches since the counter started")
    cache_hits = serializers.IntegerField()
    cache_hit_ratio = serializers.FloatField(allow_null=True, help_text="null before the first query")


# Every unit a request or an ingestion consumes (engines.metering.KINDS): counts, and CPU milliseconds.
CostUnitsOutput = type(
    "CostUnitsOutput",
    (serializers.Serializer,),
    {kind: serializers.FloatField() if kind == "cpu_ms" else serializers.IntegerField() for kind in KINDS},
)


class CostOutput(serializers.Serializer[Any]):
    """What was consumed, priced by the COST_PRICE_* settings (core.cost)."""

    units = CostUnitsOutput()
    amount = serializers.FloatField(help_text="the units times their prices, summed (0 while no price is set)")
    amounts = serializers.DictField(child=serializers.FloatField(), help_text="the kinds whose amount is not 0")
    currency = serializers.CharField(
        allow_blank=True, help_text="COST_CURRENCY: a label (empty when unset), nothing is converted"
    )


class DailyCostOutput(CostOutput):
    date = serializers.DateField(help_text="UTC")


class TenantCostsOutput(serializers.Serializer[Any]):
    days = serializers.IntegerField(help_text="how many days are summed, today the last")
    daily = DailyCostOutput(many=True, help_text="the days with any use, oldest first")
    total = CostOutput(help_text="the days above together")


class StatsOutput(serializers.Serializer[Any]):
    tenant = serializers.CharField()
    knowledge_bases = serializers.IntegerField()
    documents = DocumentCountsOutput()
    chunks = serializers.IntegerField(help_text="searchable chunks (in the active version of each knowledge base)")
    queries = QueryCountsOutput(allow_null=True, help_text="null while the cache (Redis) is unreachable")
    cost = TenantCostsOutput(
        allow_null=True,
        help_text="what the tenant's requests, ingestions and version builds consumed per day, priced at the "
        "current prices; null while the cache (Redis) is unreachable",
    )


# --- knowledge bases, documents, tasks (the knowledge REST API) ------------------------------------


class IndexSettingsInput(serializers.Serializer[Any]):
    """How a KB or a new version is built; omitted: the service defaults (a KB) or the active version's."""

    embedding_model = serializers.CharField(
        required=False, max_length=255, help_text="a bundled model name, a model folder, or remote:<name>"
    )
    chunk_size = serializers.IntegerField(
        required=False, min_value=16, max_value=8192, help_text="tokens; capped at the model's limit"
    )
    chunk_overlap = serializers.IntegerField(
        required=False, min_value=0, max_value=4096, help_text="tokens; at most half the chunk size"
    )
    chunking = serializers.ChoiceField(
        choices=[PLAIN, PARENT_CHILD],
        required=False,
        help_text="plain (the default): chunks are searched and returned; parent_child: chunk_size-token children "
        "(128 by default) are searched and a hit returns their parent passage, its matched children named",
    )
    parent_chunk_size = serializers.IntegerField(
        required=False,
        min_value=16,
        max_value=8192,
        help_text="parent_child only: a parent passage's largest size in tokens (default 512), at least chunk_size",
    )
    languages = serializers.ListField(
        child=serializers.RegexField(
            LANGUAGE_TAG, max_length=35, error_messages={"invalid": "not a language tag (e.g. en, zh, zh-Hant, pt-BR)"}
        ),
        required=False,
        max_length=20,
        help_text="languages the model covers (default: known for the model)",
    )


class AclField(serializers.ListField):
    """An ACL: principals 'user:<id>', 'group:<id>' or '*' (docs/permissions.md)."""

    def __init__(self, **kwargs: Any) -> None:
        child = serializers.RegexField(PRINCIPAL_PATTERN, max_length=MAX_PRINCIPAL, trim_whitespace=False)
        super().__init__(child=child, max_length=MAX_PRINCIPALS, **kwargs)

    def to_internal_value(self, data: Any) -> list[str]:
        try:
            return clean_principals(super().to_internal_value(data), where="acl")
        except InvalidPrincipals as error:
            raise serializers.ValidationError(str(error)) from None


class KnowledgeBaseUpdateInput(serializers.Serializer[Any]):
    """``PATCH /knowledge-bases/{id}``: who may read its documents that set no ACL of their own."""

    default_acl = AclField(
        allow_empty=False, help_text="principals; ['*']: everyone in the tenant (a new KB's default)"
    )


class DocumentUpdateInput(serializers.Serializer[Any]):
    """``PATCH .../documents/{id}``: any of its labels; the change holds at the next search."""

    title = serializers.CharField(required=False, max_length=500, allow_blank=True)
    tags = serializers.ListField(child=serializers.CharField(max_length=100), required=False, max_length=100)
    metadata = serializers.DictField(required=False)
    acl = AclField(required=False, help_text="who may read it (principals); []: its knowledge base's default_acl")

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        if not data:
            raise serializers.ValidationError("give at least one of title, tags, metadata, acl")
        return data


class KnowledgeBaseInput(IndexSettingsInput):
    name = NameField()
    description = serializers.CharField(required=False, allow_blank=True, default="")


class IndexSettingsOutput(serializers.Serializer[Any]):
    embedding_model = serializers.CharField()
    embedding_dim = serializers.IntegerField()
    chunk_size = serializers.IntegerField()
    chunk_overlap = serializers.IntegerField()
    chunking = serializers.ChoiceField(choices=[PLAIN, PARENT_CHILD])
    parent_chunk_size = serializers.IntegerField(allow_null=True, help_text="parent_child: tokens; plain: null")
    languages = serializers.ListField(child=serializers.CharField())


class KnowledgeBaseOutput(IndexSettingsOutput):
    id = serializers.IntegerField()
    name = serializers.CharField()
    description = serializers.CharField()
    active_version = serializers.IntegerField(
        source="active_version.number", allow_null=True, help_text="number of the version searches read"
    )
    document_count = serializers.IntegerField()
    default_acl = serializers.ListField(
        child=serializers.CharField(), help_text="who may read its documents that set no ACL (docs/permissions.md)"
    )
    created_at = serializers.DateTimeField()


class ParseReportOutput(serializers.Serializer[Any]):
    """What the last successful parse of the file read (knowledge.parsing.ParseReport); all 0 and empty
    before the first, or for a document ingested before reports were kept."""

    pages = serializers.IntegerField(default=0, help_text="PDF pages (1 for an image)")
    slides = serializers.IntegerField(default=0)
    sheets = serializers.IntegerField(default=0)
    rows = serializers.IntegerField(default=0, help_text="spreadsheet and table-CSV data rows")
    tables = serializers.IntegerField(default=0, help_text="tables kept as Markdown tables (PDF, DOCX, PPTX)")
    ocr_pages = serializers.IntegerField(default=0, help_text="pages and images read by OCR")
    ocr_engine = serializers.CharField(default="", help_text='"tesseract" when OCR read a page')
    warnings = serializers.ListField(
        child=serializers.CharField(),
        default=list,
        help_text="what could not be read: a page OCR failed on, a hidden sheet, a slide with no text",
    )


class DocumentOutput(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    name = serializers.CharField(source="source_uri")
    title = serializers.CharField()
    doc_type = serializers.CharField()
    status = serializers.ChoiceField(choices=Document.Status.choices)
    error = serializers.CharField(help_text="why the last ingestion failed; empty when it did not")
    chunk_count = serializers.IntegerField()
    tags = serializers.ListField(child=serializers.CharField())
    metadata = serializers.DictField()
    parse_report = ParseReportOutput()
    acl = serializers.ListField(
        child=serializers.CharField(), help_text="who may read it; []: its knowledge base's default_acl"
    )
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class DocumentTextOutput(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    knowledge_base = serializers.IntegerField(source="knowledge_base_id")
    title = serializers.CharField()
    doc_type = serializers.CharField()
    text = serializers.CharField(source="extracted_text", help_text="what hits' `metadata.locator.chars` point into")
    length = serializers.SerializerMethodField(help_text="characters in `text`")

    def get_length(self, document: Document) -> int:
        return len(document.extracted_text)


class UploadInput(serializers.Serializer[Any]):
    files = serializers.ListField(child=serializers.FileField(), allow_empty=False, max_length=100)
    metadata = serializers.JSONField(
        required=False,
        binary=True,
        help_text='labels for every file, as a sidecar file sets them: {"title", "tags": [..], "metadata": {..}}',
    )

    def validate_files(self, files: "list[UploadedFile[bytes]]") -> "list[UploadedFile[bytes]]":
        names = [upload.name or "" for upload in files]  # each has one: FileField refuses a file without
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise serializers.ValidationError(f"file names must be unique in a request: {', '.join(duplicates)}")
        return files


class UploadedDocumentOutput(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    name = serializers.CharField(source="source_uri")
    status = serializers.ChoiceField(
        choices=Document.Status.choices,
        help_text="pending: new, queued; ready: a replaced document, searchable until the task swaps its chunks; "
        "failed: not accepted (the error says why)",
    )
    error = serializers.CharField()


class UploadOutput(serializers.Serializer[Any]):
    task_id = serializers.CharField()
    status_url = serializers.CharField(help_text="GET it to follow the task")
    documents = UploadedDocumentOutput(many=True)


class TaskProgressOutput(serializers.Serializer[Any]):
    done = serializers.IntegerField()
    total = serializers.IntegerField()
    unit = serializers.CharField(help_text="what is counted, e.g. documents")


class TaskOutput(serializers.Serializer[Any]):
    task_id = serializers.CharField()
    kind = serializers.CharField(help_text="ingest, build_version or sync_source")
    knowledge_base = serializers.IntegerField()
    state = serializers.ChoiceField(choices=["PENDING", "STARTED", "PROGRESS", "SUCCESS", "FAILURE", "RETRY"])
    progress = TaskProgressOutput(allow_null=True)
    result = serializers.DictField(allow_null=True, help_text="counts of a finished ingestion")
    error = serializers.CharField(allow_null=True, help_text="why it failed, or why it is being retried")


class VersionInput(IndexSettingsInput):
    activate = serializers.ChoiceField(
        choices=["auto", "manual", "gated"],
        default="manual",
        help_text="auto: switch searches to it once it validates; manual: wait for POST .../activate; gated: "
        "switch once it validates and scores no worse than the active version on the KB's query set (nDCG@10, "
        "KB_VERSION_GATE_NDCG), else stay ready with a report (GET .../versions/{number}/gate)",
    )


class VersionOutput(IndexSettingsOutput):
    number = serializers.IntegerField()
    status = serializers.ChoiceField(choices=KnowledgeBaseVersion.Status.choices)
    document_count = serializers.IntegerField(help_text="documents with chunks in this version")
    chunk_count = serializers.IntegerField()
    error = serializers.CharField(help_text="why the build failed: the documents it could not build")
    created_at = serializers.DateTimeField(help_text="when its build started")
    finished_at = serializers.DateTimeField(allow_null=True, help_text="when its build ended")
    activated_at = serializers.DateTimeField(allow_null=True, help_text="when searches last switched to it")


class VersionBuildOutput(serializers.Serializer[Any]):
    task_id = serializers.CharField()
    status_url = serializers.CharField(help_text="GET it to follow the build")
    version = VersionOutput()


# --- sources (folders or URLs kept in sync on a schedule) ----------------------------------------------


class SourceSettingsInput(serializers.Serializer[Any]):
    """What registering and changing a source share: the URL list and the schedule."""

    urls = serializers.ListField(
        child=serializers.URLField(max_length=2048),
        required=False,
        allow_empty=False,
        max_length=1000,
        help_text="URL sources: http(s) URLs, each fetched as one document",
    )
    interval_seconds = serializers.IntegerField(
        required=False, min_value=10, max_value=366 * 86400, help_text="sync every this many seconds"
    )
    crontab = serializers.CharField(
        required=False, max_length=200, help_text='or on this five-field crontab, UTC (e.g. "*/15 * * * *")'
    )

    acl = AclField(
        required=False,
        help_text="who may read its documents; []: the KB's default. A folder's .acl.json or a file's sidecar "
        "wins over it (docs/permissions.md)",
    )

    def validate_urls(self, urls: list[str]) -> list[str]:
        for url in urls:
            if urlsplit(url).scheme not in ("http", "https"):
                raise serializers.ValidationError(f"{url}: only http and https URLs")
        return urls

    def validate_crontab(self, value: str) -> str:
        try:
            crontab_validator(value)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.messages) from None
        return value


class SourceInput(SourceSettingsInput):
    kind = serializers.ChoiceField(choices=KnowledgeSource.Kind.choices)
    path = serializers.CharField(
        required=False,
        max_length=1024,
        help_text="folder sources: absolute, or relative to the first of KNOWLEDGE_SOURCE_ROOTS, and under one of them",
    )

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        folder = data["kind"] == KnowledgeSource.Kind.FOLDER
        if folder and ("path" not in data or "urls" in data):
            raise serializers.ValidationError({"path": ["a folder source needs a path (and no urls)"]})
        if not folder and ("urls" not in data or "path" in data):
            raise serializers.ValidationError({"urls": ["a URL source needs urls (and no path)"]})
        if ("interval_seconds" in data) == ("crontab" in data):
            raise serializers.ValidationError({"interval_seconds": ["give interval_seconds or crontab, not both"]})
        return data


class SourceUpdateInput(SourceSettingsInput):
    """``PATCH .../sources/{id}``: any of the fields; ``context["kind"]`` is the source's kind."""

    enabled = serializers.BooleanField(required=False, help_text="false pauses the scheduled syncs; true resumes them")

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        if not data:
            raise serializers.ValidationError("give at least one of urls, interval_seconds, crontab, enabled, acl")
        if "urls" in data and self.context["kind"] != KnowledgeSource.Kind.URLS:
            raise serializers.ValidationError({"urls": ["a folder source has no urls (register another source)"]})
        if "interval_seconds" in data and "crontab" in data:
            raise serializers.ValidationError({"interval_seconds": ["give interval_seconds or crontab, not both"]})
        return data


class SourceRunOutput(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    trigger = serializers.ChoiceField(choices=SourceRun.Trigger.choices)
    status = serializers.ChoiceField(choices=SourceRun.Status.choices)
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    added = serializers.IntegerField()
    replaced = serializers.IntegerField()
    unchanged = serializers.IntegerField()
    removed = serializers.IntegerField(help_text="documents gone from the source: out of search at once")
    failed = serializers.IntegerField()
    failures = serializers.ListField(
        child=serializers.DictField(child=serializers.CharField()), help_text='[{"name", "error"}]'
    )
    error = serializers.CharField(help_text="why the whole sync failed; empty when it did not")


class SourceScheduleOutput(serializers.Serializer[Any]):
    interval_seconds = serializers.IntegerField(required=False)
    crontab = serializers.CharField(required=False)


class SourceOutput(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=KnowledgeSource.Kind.choices)
    path = serializers.CharField(help_text="folder sources: the absolute folder; empty otherwise")
    urls = serializers.ListField(child=serializers.CharField())
    schedule = serializers.SerializerMethodField(help_text="interval_seconds or crontab")
    enabled = serializers.BooleanField(
        source="periodic_task.enabled", allow_null=True, help_text="false: scheduled syncs paused"
    )
    runs = serializers.SerializerMethodField(help_text="its latest syncs, the newest first")
    document_count = serializers.IntegerField(help_text="documents it keeps (removed ones too, until purged)")
    acl = serializers.ListField(child=serializers.CharField(), help_text="who may read its documents; []: KB default")
    created_at = serializers.DateTimeField()

    @extend_schema_field(SourceScheduleOutput)
    def get_schedule(self, source: KnowledgeSource) -> dict[str, Any]:
        return source_schedule(source)

    @extend_schema_field(SourceRunOutput(many=True))
    def get_runs(self, source: KnowledgeSource) -> list[Any]:
        runs = SourceRunOutput(latest_runs(source), many=True)
        return runs.data  # type: ignore[return-value]  # the stubs: a dict, also of many=True (a list)


class SourceSyncOutput(serializers.Serializer[Any]):
    task_id = serializers.CharField()
    status_url = serializers.CharField(help_text="GET it to follow the sync")
    # Named like Field.source, which the stubs see; the serializer's metaclass takes declared fields out of the class.
    source = serializers.IntegerField()  # type: ignore[assignment]  # the stubs: Field.source, a str
