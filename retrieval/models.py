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
