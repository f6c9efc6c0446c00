from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.core.files.storage import Storage, storages
from django.db import models
from django_celery_beat.models import PeriodicTask
from pgvector.django import VectorField

from knowledge.search_settings import clean_search_settings
from tenants.models import Tenant


def originals_storage() -> Storage:
    """Where uploaded and ingested files are kept for rebuilds (``STORAGES["originals"]``)."""
    return storages["originals"]


# How a KB version cuts documents (knowledge.chunking): plain chunks, or small indexed children of
# larger parent passages that hits return (docs/knowledge.md, "Parent-child chunks").
PLAIN, PARENT_CHILD = "plain", "parent_child"
CHUNKINGS = [(PLAIN, "plain chunks"), (PARENT_CHILD, "parent-child: small chunks searched, their passage returned")]
CHUNKING_HELP = (
    "plain: each chunk is searched and returned; parent_child: chunk_size-token children are searched, "
    "their parent passage (parent_chunk_size tokens at most) is returned."
)
PARENT_SIZE_HELP = "parent_child: a parent passage's largest size in tokens of the model's tokenizer; plain: none."


class KnowledgeBase(models.Model):
    """A tenant's searchable collection; it records the embedding model and chunking that built it."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="knowledge_bases")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    embedding_model = models.CharField(max_length=255)
    embedding_dim = models.PositiveIntegerField()
    chunk_size = models.PositiveIntegerField(help_text="Chunk length in tokens of the embedding model's tokenizer.")
    chunk_overlap = models.PositiveIntegerField()
    chunking = models.CharField(max_length=16, choices=CHUNKINGS, default=PLAIN, help_text=CHUNKING_HELP)
    parent_chunk_size = models.PositiveIntegerField(null=True, blank=True, help_text=PARENT_SIZE_HELP)
    languages = ArrayField(
        models.CharField(max_length=8),
        default=list,
        blank=True,
        help_text="Languages the embedding model covers (e.g. en, zh); hybrid search lowers the dense "
        "leg for queries in other languages.",
    )
    active_version = models.OneToOneField(
        "KnowledgeBaseVersion", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    search_settings = models.JSONField(
        default=dict,
        blank=True,
        validators=[clean_search_settings],
        help_text='Fusion defaults of searches of this KB, each key optional, e.g. {"weights": {"vector": 0.5}, '
        '"rrf_k": 20, "candidates": 100, "dense_weight_floor": 0.3, "aggregate": "sum", "group_by": "chunk"}. '
        "A request's own values win; then the active version's settings; then these; then the service settings.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="unique_kb_name_per_tenant")]
        ordering = ["tenant_id", "name"]

    def __str__(self) -> str:
        return f"{self.tenant}/{self.name}"


def current_graph_extractor() -> str:
    """The version of the entity extraction this service runs (``engines.graph_extraction``)."""
    from engines.graph_extraction import EXTRACTOR_VERSION

    return EXTRACTOR_VERSION


class KnowledgeBaseVersion(models.Model):
    """A complete index set of a knowledge base, built with its own model and chunking; searches read
    the KB's active version only. A new version is *building*, then *ready* (or *failed*); activating
    it retires the active one, which stays for a rollback."""

    class Status(models.TextChoices):
        BUILDING = "building"
        READY = "ready"
        ACTIVE = "active"
        RETIRED = "retired"
        FAILED = "failed"

    knowledge_base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.BUILDING)
    embedding_model = models.CharField(max_length=255)
    embedding_dim = models.PositiveIntegerField()
    chunk_size = models.PositiveIntegerField(help_text="Chunk length in tokens of the embedding model's tokenizer.")
    chunk_overlap = models.PositiveIntegerField()
    chunking = models.CharField(max_length=16, choices=CHUNKINGS, default=PLAIN, help_text=CHUNKING_HELP)
    parent_chunk_size = models.PositiveIntegerField(null=True, blank=True, help_text=PARENT_SIZE_HELP)
    languages = ArrayField(models.CharField(max_length=8), default=list, blank=True)
    error = models.TextField(blank=True, help_text="Why the build failed.")
    finished_at = models.DateTimeField(null=True, blank=True, help_text="When its build ended.")
    activated_at = models.DateTimeField(null=True, blank=True)
    retired_at = models.DateTimeField(
        null=True, blank=True, help_text="When another version replaced it; purged KB_VERSION_RETENTION_DAYS later."
    )
    analyzer_version = models.CharField(max_length=64, blank=True)
    graph_extractor = models.CharField(
        max_length=16,
        default=current_graph_extractor,
        help_text="The entity extractor its graph was built with; another than the service's is searched with a "
        "note until manage.py rebuild_graph re-extracts it.",
    )
    revision = models.PositiveIntegerField(
        default=0, help_text="Bumped by every content change; caches and vocabularies key on it."
    )
    search_settings = models.JSONField(
        default=dict,
        blank=True,
        validators=[clean_search_settings],
        help_text="Fusion settings measured on this version (manage.py evaluate --sweep --write); they win "
        "over the KB's own, key by key. Same keys as the KB's.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["knowledge_base", "number"], name="unique_version_number_per_kb")
        ]
        ordering = ["knowledge_base_id", "number"]

    def __str__(self) -> str:
        return f"{self.knowledge_base} v{self.number}"


class Document(models.Model):
    """One source file in a knowledge base; its MD5 makes re-ingesting unchanged content a no-op."""

    class Status(models.TextChoices):
        PENDING = "pending"
        READY = "ready"
        FAILED = "failed"
        # Out of every search (no chunks); its row and stored original are purged by a task: soon after a
        # delete, SOURCE_REMOVAL_GRACE_HOURS after its file left its source (if it comes back, it is re-ingested).
        REMOVED = "removed"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="documents")
    knowledge_base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE, related_name="documents")
    source = models.ForeignKey(
        "KnowledgeSource",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="documents",
        help_text="The source whose syncs keep it (none: uploaded or ingested by a command).",
    )
    source_uri = models.CharField(max_length=1024)
    title = models.CharField(max_length=500, blank=True)
    context = models.CharField(
        max_length=500,
        blank=True,
        help_text="What every chunk was embedded and indexed with before its text (the title at ingestion; "
        "empty when the title was only the file name). A title edited later applies when the file is re-chunked.",
    )
    doc_type = models.CharField(max_length=16)
    content_md5 = models.CharField(max_length=32, blank=True)
    chunker_version = models.CharField(
        max_length=16, blank=True, help_text="knowledge.chunking.CHUNKER_VERSION that cut the current chunks"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    error = models.TextField(blank=True)
    tags = ArrayField(models.CharField(max_length=100), default=list, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    chunk_count = models.PositiveIntegerField(default=0)
    original = models.CharField(
        max_length=1024, blank=True, help_text="Name in the originals storage of the file its chunks were cut from."
    )
    removed_at = models.DateTimeField(null=True, blank=True, help_text="When it left search (status removed).")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["knowledge_base", "source_uri"], name="unique_source_per_kb")]

    def __str__(self) -> str:
        return self.title or self.source_uri


class ParentChunk(models.Model):
    """A parent passage of a ``parent_child`` version: returned by a hit on one of its child chunks,
    never searched itself (no vector, no keyword-index entry). Its own table: the chunk table's every
    search-side read and index stays as it is, and a hit reads its parent by primary key."""

    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="parents")
    kb_version = models.ForeignKey(KnowledgeBaseVersion, on_delete=models.CASCADE, related_name="parents")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    ordinal = models.PositiveIntegerField()
    content = models.TextField()
    content_hash = models.CharField(max_length=32)
    token_count = models.PositiveIntegerField()
    metadata = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"{self.document_id}#p{self.ordinal}"


class Chunk(models.Model):
    """A searchable passage. Business fields are copied from its document so filters need no join.

    ``embedding`` has no fixed dimension so KBs with different models share the table; each
    dimension gets its own partial HNSW index on ``embedding::halfvec(dim)`` (see
    ``engines.pgvector_index.PgVectorIndex.ensure_index``).
    """

    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks")
    kb_version = models.ForeignKey(KnowledgeBaseVersion, on_delete=models.CASCADE, related_name="chunks")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    knowledge_base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE, related_name="+")
    ordinal = models.PositiveIntegerField()
    content = models.TextField()
    content_hash = models.CharField(max_length=32)
    token_count = models.PositiveIntegerField()
    embedding_dim = models.PositiveSmallIntegerField()
    embedding = VectorField()
    doc_type = models.CharField(max_length=16)
    created_at = models.DateTimeField()
    tags = ArrayField(models.CharField(max_length=100), default=list, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    # A child chunk's parent passage (parent_child versions); null in a plain version. Indexed only where set.
    parent = models.ForeignKey(
        ParentChunk, null=True, blank=True, on_delete=models.CASCADE, related_name="children", db_index=False
    )

    class Meta:
        indexes = [
            models.Index(fields=["parent"], name="chunk_parent", condition=models.Q(parent__isnull=False)),
            models.Index(fields=["kb_version", "doc_type"], name="chunk_version_doctype"),
            models.Index(fields=["kb_version", "created_at"], name="chunk_version_created"),
            models.Index(fields=["document", "ordinal"], name="chunk_document_ordinal"),
            GinIndex(fields=["metadata"], name="chunk_metadata_gin", opclasses=["jsonb_path_ops"]),
            GinIndex(fields=["tags"], name="chunk_tags_gin"),
        ]
        # No default ordering: it would join and sort documents, KBs and tenants on every search
        # query. The admin orders its lists.

    def __str__(self) -> str:
        return f"{self.document_id}#{self.ordinal}"


class KnowledgeTask(models.Model):
    """A Celery task started for a tenant: ``GET /api/v1/tasks/{task_id}`` answers only its owner.
    State and progress live in Celery's result backend; this row records who may read them."""

    class Kind(models.TextChoices):
        INGEST = "ingest"
        BUILD_VERSION = "build_version"
        SYNC_SOURCE = "sync_source"

    # Celery state of a running task that reported {"done", "total", "unit"}; its result repeats the last.
    PROGRESS = "PROGRESS"

    task_id = models.CharField(max_length=64, unique=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="knowledge_tasks")
    knowledge_base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE, related_name="tasks")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.kind} {self.task_id}"


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

    def clean(self):
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

    def clean(self):
        from django.core.exceptions import ValidationError

        self.terms = [term.strip() for term in self.terms if term.strip()]
        self.replacements = [term.strip() for term in self.replacements if term.strip()]
        if not 0 < self.weight <= 1:
            raise ValidationError({"weight": "must be in (0, 1]"})
        if self.kind == self.Kind.EQUIVALENT and len(self.terms) < 2:
            raise ValidationError({"terms": "a two-way group needs at least two terms"})
        if self.kind == self.Kind.EXPLICIT and (not self.terms or not self.replacements):
            raise ValidationError({"replacements": "a one-way rule needs terms and replacements"})


class PendingLexicalChange(models.Model):
    """Documents of a KB version whose keyword-index entries must be rewritten from their rows.

    Written in the transaction that changes the rows and deleted once the index holds the change, so
    the index can never miss a committed change: a process killed between the database commit and
    the index write leaves this row for the next writer or ``check_kb --repair`` to apply; a
    transaction that rolls back takes it along, and the index was never touched (see docs/operations.md,
    "Consistency of rows and keyword index")."""

    kb_version = models.ForeignKey(KnowledgeBaseVersion, on_delete=models.CASCADE, related_name="+")
    document_ids = ArrayField(models.BigIntegerField())
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"v{self.kb_version_id}: documents {self.document_ids}"


# --- graph (read and written by engines.postgres_graph through knowledge.stores.graph_store) ----------


class GraphEntity(models.Model):
    """An entity of a KB version's graph: one per normalized name (``engines.graph_extraction``)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    kb_version = models.ForeignKey(KnowledgeBaseVersion, on_delete=models.CASCADE, related_name="graph_entities")
    name = models.CharField(max_length=200)
    label = models.CharField(max_length=200)
    kind = models.CharField(max_length=16)
    chunk_count = models.PositiveIntegerField(default=0, help_text="Passages that mention it.")

    class Meta:
        verbose_name_plural = "graph entities"
        constraints = [models.UniqueConstraint(fields=["kb_version", "name"], name="unique_entity_name_per_version")]
        # pg_trgm: a query's misspelt Latin name finds its entity (GraphStore.find_similar)
        indexes = [GinIndex(fields=["name"], opclasses=["gin_trgm_ops"], name="graph_entity_name_trgm")]

    def __str__(self) -> str:
        return self.label


def _unchecked_key(to: type[models.Model], related_name: str = "+") -> models.ForeignKey:
    """A key of the graph's bulk rows that the database does not check (see ``GraphEdge``); Django's
    deletions still cascade through it."""
    return models.ForeignKey(
        to, on_delete=models.CASCADE, related_name=related_name, db_index=False, db_constraint=False
    )


class GraphMention(models.Model):
    """An entity mentioned in a passage, ``count`` times; graph hits map back to passages through it.
    Its keys but the chunk's are not checked by the database (see ``GraphEdge``)."""

    tenant = _unchecked_key(Tenant)
    kb_version = _unchecked_key(KnowledgeBaseVersion)
    entity = _unchecked_key(GraphEntity, related_name="mentions")
    chunk = models.ForeignKey(Chunk, on_delete=models.CASCADE, related_name="+")
    count = models.PositiveIntegerField()

    class Meta:
        # an entity's passages that mention it most, read without sorting all of a common entity's mentions
        indexes = [models.Index(fields=["entity", "-count", "chunk"], name="graph_mention_entity_top")]

    def __str__(self) -> str:
        return f"entity {self.entity_id} in chunk {self.chunk_id} x{self.count}"


class GraphEdge(models.Model):
    """Two entities' relation of one kind in a KB version, summed over the passages that relate them:
    one row per entity pair and kind (co-occurrence: ``source`` id < ``target`` id; a typed relation
    from its head to its tail, "X made_by Y"), so a walk reads one row per
    neighbour, the strongest first through an index on either end. ``passages``: the passage relations
    it sums; the row goes with the last of them (``GraphPassageRelations`` says what each passage added).

    Its keys, like a mention's (but its chunk), are not checked by the database: a passage adds dozens of
    edges and mentions, and a deferred foreign-key check each made the graph writes far slower
    (docs/benchmarks/decisions.md, "Relation columns, the Han run cache and unchecked keys"). ``PostgresGraphStore`` keeps them whole (an
    entity goes when nothing mentions it, an edge with its passages' relations), and Django's deletions
    still cascade through them."""

    pk = models.CompositePrimaryKey("source", "target", "kind")
    tenant = _unchecked_key(Tenant)
    kb_version = _unchecked_key(KnowledgeBaseVersion)
    source = _unchecked_key(GraphEntity)
    target = _unchecked_key(GraphEntity)
    kind = models.CharField(
        max_length=64,
        blank=True,
        default="",
        help_text="Empty: co-occurrence (source id < target id); else the relation a sentence states or an LLM named, "
        "directed from source to target.",
    )
    weight = models.FloatField(help_text="The sum of its passages' weights.")
    passages = models.PositiveIntegerField(help_text="Passage relations summed in it.")

    class Meta:
        # an entity's strongest neighbours on either side of the pair, read without sorting all of them
        indexes = [
            models.Index(fields=["source", "-weight"], name="graph_edge_source_top"),
            models.Index(fields=["target", "-weight"], name="graph_edge_target_top"),
        ]

    def __str__(self) -> str:
        return f"{self.source_id} - {self.target_id} ({self.kind or 'co-occurrence'})"


class GraphPassageRelations(models.Model):
    """The relations one passage added to its version's edges (parallel arrays, ends as in ``GraphEdge``):
    read back only to subtract them when the passage goes (re-ingestion, deletion, graph rebuild)."""

    chunk = models.OneToOneField(Chunk, on_delete=models.CASCADE, primary_key=True, related_name="+")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    kb_version = models.ForeignKey(KnowledgeBaseVersion, on_delete=models.CASCADE, related_name="+", db_index=False)
    source_ids = ArrayField(models.BigIntegerField())
    target_ids = ArrayField(models.BigIntegerField())
    weights = ArrayField(models.FloatField())
    kinds = ArrayField(models.CharField(max_length=64))

    class Meta:
        verbose_name_plural = "graph passage relations"

    def __str__(self) -> str:
        return f"relations of chunk {self.chunk_id}"


class GraphEntityRule(models.Model):
    """A curator's edit of a knowledge base's graph, kept as a rule: every extraction of the KB's
    passages (ingestion, a new version's build, ``rebuild_graph``) applies it, so the edit holds through
    re-ingestion (``knowledge.graph_curation`` writes them; ``selectors.graph_curation`` reads them)."""

    class Action(models.TextChoices):
        MERGE = "merge", "merge into another entity"
        RENAME = "rename", "rename"
        DELETE = "delete", "delete"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    knowledge_base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE, related_name="graph_rules")
    name = models.CharField(max_length=200, help_text="The normalized entity name it applies to.")
    action = models.CharField(max_length=16, choices=Action.choices)
    target = models.CharField(
        max_length=200, blank=True, help_text="merge: the name of the entity it goes into; rename: its new name."
    )
    label = models.CharField(max_length=200, blank=True, help_text="rename: the label the entity is shown with.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["knowledge_base", "name"], name="unique_graph_rule_per_kb")]

    def __str__(self) -> str:
        return f"{self.action} {self.name}" + (f" -> {self.target}" if self.target else "")


class GraphCommunity(models.Model):
    """A community of a KB version's entity graph with its summary (``knowledge.communities`` builds
    them, ``engines.graph_communities`` finds them); global graph search ranks these."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    kb_version = models.ForeignKey(KnowledgeBaseVersion, on_delete=models.CASCADE, related_name="graph_communities")
    level = models.PositiveSmallIntegerField(help_text="0: the coarsest partition; each level splits the one above.")
    number = models.PositiveIntegerField(help_text="Unique per version and level; the bigger communities first.")
    parent = models.PositiveIntegerField(null=True, blank=True, help_text="The number of the community one level up.")
    entity_ids = ArrayField(models.BigIntegerField(), help_text="Its entities, the most central first.")
    key_entities = ArrayField(models.CharField(max_length=200))
    summary = models.TextField()
    analyzed = models.TextField(help_text="The summary as the analyzer tokenizes it (BM25 over summaries).")
    chunk_ids = ArrayField(models.BigIntegerField(), help_text="Supporting passages, the best first.")
    embedding = ArrayField(models.FloatField(), default=list, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["kb_version", "level", "number"], name="unique_community_per_version")
        ]
        verbose_name_plural = "graph communities"

    def __str__(self) -> str:
        return f"L{self.level} #{self.number}: {', '.join(self.key_entities[:3])}"
