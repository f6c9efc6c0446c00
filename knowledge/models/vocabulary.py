"""The vocabulary admins curate: protected terms and synonym groups."""

from django.contrib.postgres.fields import ArrayField
from django.db import models

from tenants.models import Tenant


class DictionaryTerm(models.Model):
    """A term the analyzer keeps whole for one tenant: a product code, an order-number pattern, a dish."""

    class Kind(models.TextChoices):
        TERM = "term"
        PATTERN = "pattern", "pattern (regular expression)"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="dictionary_terms")
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.TERM)
    value = models.CharField(max_length=200)
    note = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "kind", "value"], name="unique_dictionary_term")]
        ordering = ["tenant_id", "kind", "value"]

    def __str__(self) -> str:
        return self.value

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        self.value = self.value.strip()
        if not self.value:
            raise ValidationError({"value": "may not be blank"})
        if self.kind == self.Kind.PATTERN:
            import re

            try:
                re.compile(self.value)
            except re.error as exc:
                raise ValidationError({"value": f"not a valid regular expression: {exc}"}) from None


class Synonym(models.Model):
    """Admin-curated query expansion for one tenant.

    An *equivalent* group makes every term expand to every other; an *explicit* rule rewrites its
    terms into its replacements only (one way). ``weight`` scales the expanded query in fusion.
    """

    class Kind(models.TextChoices):
        EQUIVALENT = "equivalent", "two-way group"
        EXPLICIT = "explicit", "one-way rule"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="synonyms")
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.EQUIVALENT)
    terms = ArrayField(models.CharField(max_length=100))
    replacements = ArrayField(models.CharField(max_length=100), default=list, blank=True)
    weight = models.FloatField(default=0.5)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant_id", "id"]

    def __str__(self) -> str:
        arrow = " => " + ", ".join(self.replacements) if self.kind == self.Kind.EXPLICIT else ""
        return ", ".join(self.terms) + arrow

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        self.terms = [term.strip() for term in self.terms if term.strip()]
        self.replacements = [term.strip() for term in self.replacements if term.strip()]
        if not 0 < self.weight <= 1:
            raise ValidationError({"weight": "must be in (0, 1]"})
        if self.kind == self.Kind.EQUIVALENT and len(self.terms) < 2:
            raise ValidationError({"terms": "a two-way group needs at least two terms"})
        if self.kind == self.Kind.EXPLICIT and (not self.terms or not self.replacements):
            raise ValidationError({"replacements": "a one-way rule needs terms and replacements"})
