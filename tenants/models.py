from datetime import datetime

from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.db import IntegrityError, models, transaction
from django.utils import timezone

from core.uniqueness import violated_unique_constraint
from tenants.errors import ActAsNotAllowed
from tenants.principals import reader_of, validate_principals

# The counters a tier limits: one per search mode (retrieval's MODES, graph included), the stats endpoint's, and the
# knowledge API's reads and writes (a test keeps them equal to what the views count). A counter joins
# here when something counts it, so no tier holds a dead limit.
RATE_LIMITED_ENDPOINTS = ("vector", "bm25", "hybrid", "graph", "stats", "knowledge", "ingest")
_ENDPOINT_NAMES = ", ".join(RATE_LIMITED_ENDPOINTS)

# New tenants get the free tier; recreated with the limits the migrations give it if it was deleted.
FREE_TIER = "free"
FREE_TIER_LIMITS = {"requests_per_window": 100, "endpoint_limits": {"hybrid": 50}}
RATE_TIER_NAME_UNIQUE = "tenants_ratetier_name_key"  # PostgreSQL's name for the column's UNIQUE


class RateTier(models.Model):
    """Request limits of a tenant, counted per endpoint in fixed windows of ``RATE_LIMIT_WINDOW_S``
    seconds (a minute by default); ``endpoint_limits`` overrides ``requests_per_window``."""

    name = models.CharField(max_length=50, unique=True)
    requests_per_window = models.PositiveIntegerField(
        help_text="Limit per window (RATE_LIMIT_WINDOW_S, 60 s by default) of each endpoint without an override."
    )
    endpoint_limits = models.JSONField(
        default=dict,
        blank=True,
        help_text=f'Per-endpoint overrides of the limit per window, e.g. {{"hybrid": 50}}; '
        f"endpoints: {_ENDPOINT_NAMES}.",
    )

    class Meta:
        ordering = ["requests_per_window", "name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        limits = self.endpoint_limits
        if not isinstance(limits, dict) or not all(
            name in RATE_LIMITED_ENDPOINTS and isinstance(limit, int) and not isinstance(limit, bool) and limit > 0
            for name, limit in limits.items()
        ):
            message = f"must map endpoint names ({_ENDPOINT_NAMES}) to positive integers"
            raise ValidationError({"endpoint_limits": message})

    def limit_for(self, endpoint: str) -> int:
        limit: int = self.endpoint_limits.get(endpoint, self.requests_per_window)
        return limit


def default_rate_tier() -> int:
    """The free tier's id (only its id is read and nothing ordered by other columns, so old migrations
    keep working as the model grows). Of two processes recreating it at once, the loser reads the winner's."""
    pk = _free_tier_pk()
    if pk is None:
        try:
            with transaction.atomic():
                pk = RateTier.objects.create(name=FREE_TIER, **FREE_TIER_LIMITS).pk
        except IntegrityError as error:
            if violated_unique_constraint(error) != RATE_TIER_NAME_UNIQUE:
                raise
            pk = _free_tier_pk()
            assert pk is not None  # the row whose insert beat ours
    return pk


def _free_tier_pk() -> int | None:
    return RateTier.objects.filter(name=FREE_TIER).order_by().values_list("pk", flat=True).first()


class Tenant(models.Model):
    """An isolated customer: every knowledge base, document and chunk belongs to exactly one."""

    name = models.CharField(max_length=100, unique=True)
    is_active = models.BooleanField(default=True)
    # Query expansion defaults; a request's "expand" options override them.
    expand_synonyms = models.BooleanField(default=True)
    expand_spelling = models.BooleanField(default=False, help_text="Spelling correction against the KB vocabulary.")
    expand_llm = models.BooleanField(default=False, help_text="LLM query rewriting (needs LLM_URL).")
    record_searches = models.BooleanField(
        default=True,
        help_text="Keep the tenant's queries for the console's search analytics (the query text and how it was "
        "answered; no key, no client; purged after SEARCH_LOG_RETENTION_DAYS).",
    )
    rate_tier = models.ForeignKey(RateTier, on_delete=models.PROTECT, default=default_rate_tier, related_name="tenants")
    # A new random value with every write of the tenant's synonyms or protected terms (knowledge's vocabulary):
    # searches read it with their KB versions and keep the vocabulary per stamp instead of reading it each time.
    vocabulary_stamp = models.BigIntegerField(default=0, db_default=0, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Scope(models.TextChoices):
    """What a key may do; scopes are independent (``admin`` does not imply ``search``)."""

    SEARCH = "search"
    INGEST = "ingest"
    ADMIN = "admin"
    # May name the end user's principals in a search body (issue 48, docs/permissions.md).
    ACT_AS = "act_as"


def default_scopes() -> list[str]:
    return [Scope.SEARCH.value]


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
    scopes = ArrayField(models.CharField(max_length=16, choices=Scope.choices), default=default_scopes)
    principals = ArrayField(
        models.CharField(max_length=200),
        default=list,
        blank=True,
        validators=[validate_principals],
        help_text="Bound principals ('user:<id>', 'group:<id>'): the key searches as them, whatever a body says. "
        "None: it searches as the body's principals with the act_as scope, else sees only documents open to '*'.",
    )
    knowledge_base_ids = ArrayField(
        models.BigIntegerField(),
        default=list,
        blank=True,
        help_text="The knowledge bases the key may reach (ids); any other answers like a missing one. "
        "None: every knowledge base of its tenant.",
    )

    class Meta:
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.tenant})"

    def is_usable(self, now: datetime | None = None) -> bool:
        now = now or timezone.now()
        if self.revoked_at is not None and self.revoked_at <= now:
            return False
        return self.expires_at is None or self.expires_at > now

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes

    def reader(self, given: list[str] | None) -> tuple[str, ...]:
        """The principals a search by this key runs as: its bound ones; else the body's ``given`` ones
        (only with ``act_as``: ``ActAsNotAllowed`` otherwise); else everyone's (``*``) alone."""
        if self.principals:
            return reader_of(self.principals)
        if given is not None:
            if not self.has_scope(Scope.ACT_AS):
                raise ActAsNotAllowed("Only a key with the act_as scope may send principals.")
            return reader_of(given)
        return reader_of(())

    @property
    def reachable_kb_ids(self) -> tuple[int, ...] | None:
        """The knowledge bases the key may reach; None: every one of its tenant's."""
        return tuple(self.knowledge_base_ids) or None

    def listing_reader(self) -> tuple[str, ...] | None:
        """Whose documents the knowledge API's reads (listings, counts, stats) show this key: all of them
        for a curator (``ingest`` or ``admin``), else those its reader may read (docs/permissions.md)."""
        if self.has_scope(Scope.INGEST) or self.has_scope(Scope.ADMIN):
            return None
        return self.reader(None)
