"""A curator's changes to a document's chunks, kept apart from the chunks themselves so that they
outlive re-ingestion: each names the chunk it changes by the hash of the text ingestion cut."""

from __future__ import annotations

from django.db import models

from knowledge.models.content import Document
from tenants.models import Tenant


class ChunkEdit(models.Model):
    """One ingested chunk a curator edited or disabled (``original_hash`` set), or a chunk a curator added
    (``manual``). Re-ingestion applies it to the chunk cut with the same text; when the file changed and
    no chunk has that text any more, it is not applied and ``needs_review`` says so."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunk_edits")
    manual = models.BooleanField(default=False, help_text="added by a curator, not cut from the file")
    original_hash = models.CharField(max_length=32, blank=True, help_text="MD5 of the text ingestion cut")
    original_content = models.TextField(blank=True)
    content = models.TextField(help_text="the curator's text (a disabled chunk: the text it had)")
    enabled = models.BooleanField(default=True)
    needs_review = models.BooleanField(
        default=False, help_text="the file changed and no chunk has the original text any more: not applied"
    )
    chunk_id = models.BigIntegerField(null=True, blank=True, help_text="the chunk's id when last applied")
    ordinal = models.PositiveIntegerField(default=0)
    metadata = models.JSONField(default=dict, blank=True, help_text="the chunk's metadata when last applied")
    edited_by = models.CharField(max_length=200, blank=True)
    edited_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["document", "original_hash"],
                condition=models.Q(manual=False),
                name="one_edit_per_ingested_chunk",
            )
        ]
        indexes = [models.Index(fields=["chunk_id"], name="chunk_edit_chunk")]

    def __str__(self) -> str:
        return f"{self.document_id}: {'added' if self.manual else 'edited'} chunk"
