"""What the search keeps: the console's history of retrieval tests."""
from django.conf import settings
from django.db import models

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
