"""Where a KB's documents come from and each sync of them."""

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django_celery_beat.models import PeriodicTask

from knowledge.models.content import KnowledgeBase
from tenants.principals import validate_principals


class KnowledgeSource(models.Model):
    """Where a KB's documents come from and are kept fresh: a folder on the server (under one of
    ``KNOWLEDGE_SOURCE_ROOTS``) or a list of URLs, synced on a django-celery-beat schedule (an interval
    or a crontab) by ``knowledge.tasks.sync_source``; each sync is recorded as a :class:`SourceRun`."""

    class Kind(models.TextChoices):
        FOLDER = "folder"
        URLS = "urls"

    knowledge_base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE, related_name="sources")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    path = models.CharField(max_length=1024, blank=True, help_text="A folder source's absolute, resolved path.")
    urls = ArrayField(models.CharField(max_length=2048), default=list, blank=True)
    acl = ArrayField(
        models.CharField(max_length=200),
        default=list,
        blank=True,
        validators=[validate_principals],
        help_text="The ACL of its documents ('user:<id>', 'group:<id>', '*'); empty: the KB's default. A folder's "
        ".acl.json or a file's sidecar wins over it (docs/permissions.md).",
    )
    periodic_task = models.OneToOneField(
        PeriodicTask, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="Beat's entry that syncs it (its interval or crontab).",
    )  # fmt: skip
    # Per URL, the validators of its last fetch, sent back as If-None-Match / If-Modified-Since.
    fetch_state = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["knowledge_base_id", "id"]

    def __str__(self) -> str:
        where = self.path if self.kind == self.Kind.FOLDER else f"{len(self.urls)} URL(s)"
        return f"{self.knowledge_base}: {where}"


class SourceRun(models.Model):
    """One sync of a source: when it ran and what it did to the KB's documents."""

    class Status(models.TextChoices):
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    class Trigger(models.TextChoices):
        SCHEDULE = "schedule"
        MANUAL = "manual"

    source = models.ForeignKey(KnowledgeSource, on_delete=models.CASCADE, related_name="runs")
    trigger = models.CharField(max_length=16, choices=Trigger.choices, default=Trigger.SCHEDULE)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    added = models.PositiveIntegerField(default=0)
    replaced = models.PositiveIntegerField(default=0)
    unchanged = models.PositiveIntegerField(default=0)
    removed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    failures = models.JSONField(default=list, blank=True, help_text='[{"name", "error"}] of the files that failed')
    error = models.TextField(blank=True, help_text="Why the whole sync failed.")

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["source", "-started_at"], name="source_run_recent")]

    def __str__(self) -> str:
        return f"{self.source} @ {self.started_at:%Y-%m-%d %H:%M:%S}"
