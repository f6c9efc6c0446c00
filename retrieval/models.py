"""What the search keeps: the console's history of retrieval tests, the tenants' queries, and the semantic cache's query vectors."""

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.db import models
from django.utils import timezone
from pgvector.django import VectorField

from tenants.models import Tenant


class RetrievalRun(models.Model):
    """One retrieval test run from the admin console, kept per user so it can be re-run with one click."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="retrieval_runs")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="retrieval_runs")
    query = models.TextField()
    params = models.JSONField()  # the submitted form fields (name -> list of values): re-running rebinds them
    top_hits = models.JSONField(default=list)  # [{"chunk_id", "title", "score"}], best first
    timings_ms = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["user", "-created_at"], name="retrieval_run_user_recent")]
        verbose_name = "retrieval test"
        verbose_name_plural = "retrieval testing"

    def __str__(self) -> str:
        return self.query


class SearchLog(models.Model):
    """One query a tenant's client searched, as the console's search analytics read it
    (``retrieval.search_log`` writes them off the request thread). Only the query text and how it
    was answered: no API key, no client address, no user."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="search_logs")
    query = models.TextField()  # whitespace collapsed and casefolded: one row per way of asking it
    mode = models.CharField(max_length=16)
    kb_ids = ArrayField(models.BigIntegerField())  # the knowledge bases searched
    hits = models.PositiveIntegerField()
    best_relevance = models.FloatField(null=True)  # None: no hit
    # BM25 and dense shared no hit in their first five (None: not both legs answered)
    legs_disagree = models.BooleanField(null=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "-created_at"], name="search_log_tenant_recent"),
            GinIndex(fields=["kb_ids"], name="search_log_kb_ids"),
        ]

    def __str__(self) -> str:
        return self.query


class SemanticCacheEntry(models.Model):
    """A cached search's query vector (``retrieval.semantic_cache``): a later query of the same scope
    (tenant, KB revisions, vocabulary, every option but the query) whose vector is close enough and
    whose exact tokens (``retrieval.query_signature``) are equal reuses the answer the result cache
    keeps under ``key``. Unreachable once a revision or the vocabulary moves on (a new scope), it
    expires with that entry (``SEARCH_CACHE_TTL_S``); the hourly beat task deletes expired rows."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="semantic_cache_entries")
    scope = models.CharField(max_length=64)  # sha256 of the search cache key's material without the query
    signature = models.CharField(max_length=32)  # of the query's exact tokens
    query = models.TextField()  # as searched: a hit names it
    key = models.CharField(max_length=200)  # the result cache's key of its answer
    # No dimension: scopes of different models share the table; a scope holds one model's vectors.
    embedding = VectorField()
    expires_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "key"], name="unique_semantic_cache_key")]
        indexes = [
            models.Index(fields=["tenant", "scope", "signature"], name="semantic_cache_scope"),
            models.Index(fields=["expires_at"], name="semantic_cache_expiry"),
        ]

    def __str__(self) -> str:
        return self.query


GRADES = (0, 1, 2)  # not relevant, relevant, highly relevant (BEIR's graded qrels)


class JudgedQuery(models.Model):
    """One query of a knowledge base's query set (``retrieval.query_sets``): what an evaluation run
    searches, with the documents a curator judged for it."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="judged_queries")
    knowledge_base = models.ForeignKey(
        "knowledge.KnowledgeBase", on_delete=models.CASCADE, related_name="judged_queries"
    )
    query = models.TextField()  # stripped; one row per text in a KB
    origin = models.CharField(max_length=16)  # console, analytics, import or api: where it joined the set
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["knowledge_base", "query"], name="unique_judged_query")]

    def __str__(self) -> str:
        return self.query


class Judgment(models.Model):
    """A grade (0-2) of one document for one judged query. The document is named as a judgment of
    ``manage.py evaluate --tenant`` names it: its file name (the last part of its source URI)."""

    judged_query = models.ForeignKey(JudgedQuery, on_delete=models.CASCADE, related_name="judgments")
    document = models.CharField(max_length=1000)
    grade = models.PositiveSmallIntegerField(choices=[(grade, str(grade)) for grade in GRADES])
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["judged_query", "document"], name="unique_judgment")]

    def __str__(self) -> str:
        return f"{self.document}: {self.grade}"


class EvaluationRun(models.Model):
    """One evaluation of a knowledge base on its query set (``retrieval.evaluation.kb_runs``), run by a
    Celery task that counts its progress here; kept with the settings it searched with and the version
    and revision it scored, so later runs compare against it."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="evaluation_runs")
    knowledge_base = models.ForeignKey(
        "knowledge.KnowledgeBase", on_delete=models.CASCADE, related_name="evaluation_runs"
    )
    version_number = models.PositiveIntegerField(null=True)  # the active version it scored
    revision = models.PositiveIntegerField(null=True)  # that version's revision when the run started
    settings = models.JSONField(default=dict)  # the variant searched (mode, fusion, weights, rerank, ...)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    done = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    summary = models.JSONField(default=dict)  # metrics, latency, threshold curve (RunResult.summary)
    per_query = models.JSONField(default=dict)  # judged query id -> metrics and latency
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["knowledge_base", "-created_at"], name="evaluation_run_kb_recent")]

    def __str__(self) -> str:
        return f"evaluation {self.pk} of {self.knowledge_base_id}"

    @property
    def metric(self) -> dict[str, float | None]:
        """The summary's figures under names a template can read (``ndcg``, ``recall``, ``mrr``)."""
        metrics = (self.summary or {}).get("metrics") or {}
        return {"ndcg": metrics.get("ndcg@10"), "recall": metrics.get("recall@10"), "mrr": metrics.get("mrr@10")}


class VersionGate(models.Model):
    """A comparison of a ready version with the active one (``retrieval.evaluation.gate``): nDCG@10 of
    both on the KB's query set, the per-query losses, the overlap of their top 10s on recent real
    queries, and whether the version passed (and was switched to, for ``activate: "gated"``)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="version_gates")
    knowledge_base = models.ForeignKey(
        "knowledge.KnowledgeBase", on_delete=models.CASCADE, related_name="version_gates"
    )
    version_number = models.PositiveIntegerField()  # the candidate
    active_number = models.PositiveIntegerField()  # the version it was compared with
    passes = models.BooleanField()
    activated = models.BooleanField(default=False)
    report = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["knowledge_base", "version_number", "-created_at"], name="version_gate_recent")]

    def __str__(self) -> str:
        return f"gate of version {self.version_number} of {self.knowledge_base_id}"
