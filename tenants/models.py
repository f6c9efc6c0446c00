from django.db import models
from django.utils import timezone


class Tenant(models.Model):
    """An isolated customer: every knowledge base, document and chunk belongs to exactly one."""

    name = models.CharField(max_length=100, unique=True)
    is_active = models.BooleanField(default=True)
    # Query expansion defaults; a request's "expand" options override them.
    expand_synonyms = models.BooleanField(default=True)
    expand_spelling = models.BooleanField(default=False, help_text="Spelling correction against the KB vocabulary.")
    expand_llm = models.BooleanField(default=False, help_text="LLM query rewriting (needs LLM_URL).")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ApiKey(models.Model):
    """A bearer credential for one tenant. Only a SHA-256 of the key is stored; the key is shown once."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, unique=True, help_text="Public part of the key, for lookup and display.")
    key_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.tenant})"

    def is_usable(self, now=None) -> bool:
        now = now or timezone.now()
        if self.revoked_at is not None and self.revoked_at <= now:
            return False
        return self.expires_at is None or self.expires_at > now
