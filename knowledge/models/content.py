"""Knowledge bases, their versions, documents, passages and the work done on them."""

from typing import Any

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.core.files.storage import Storage, storages
from django.db import models
from django.db.models import Value
from pgvector.django import VectorField

from knowledge.search_settings import clean_search_settings
from tenants.models import Tenant
from tenants.principals import PUBLIC_ACL, public_acl, validate_principals

ACL_HELP = "Principals that may read it: 'user:<id>', 'group:<id>' or '*' (everyone in the tenant)."


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
    default_acl = ArrayField(
        models.CharField(max_length=200),
        default=public_acl,
        validators=[validate_principals],
        help_text=f"The ACL of its documents that set none (docs/permissions.md). {ACL_HELP}",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="unique_kb_name_per_tenant")]
        ordering = ["tenant_id", "name"]

    def __str__(self) -> str:
        return f"{self.tenant}/{self.name}"

    def require_active_version(self) -> "KnowledgeBaseVersion":
        """The version searches read. A KB has one from its creation (``activate_first_version``) on, so
        None is a bug: it raises here rather than as an AttributeError further on."""
        if self.active_version is None:
            raise KnowledgeBaseVersion.DoesNotExist(f"knowledge base {self.pk} has no active version")
        return self.active_version


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

    # Not columns: what the version holds, counted when read (knowledge.selectors.versions_of, version_of).
    chunk_count: int
    document_count: int

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
    acl = ArrayField(
        models.CharField(max_length=200),
        default=list,
        blank=True,
        validators=[validate_principals],
        help_text=f"{ACL_HELP} Empty: its knowledge base's default ACL.",
    )
    chunk_count = models.PositiveIntegerField(default=0)
    parse_report = models.JSONField(
        default=dict,
        blank=True,
        help_text="What the last successful parse read (knowledge.parsing.ParseReport.as_dict): pages, slides, "
        "sheets, rows, tables, OCR'd pages and warnings.",
    )
    extracted_text = models.TextField(
        blank=True,
        help_text="The text its chunks were cut from (knowledge.parsing.ParsedDocument.text), which chunk "
        "locators' character offsets point into; empty until a parse after it was kept.",
    )
    original = models.CharField(
        max_length=1024, blank=True, help_text="Name in the originals storage of the file its chunks were cut from."
    )
    removed_at = models.DateTimeField(null=True, blank=True, help_text="When it left search (status removed).")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["knowledge_base", "source_uri"], name="unique_source_per_kb")]

    # Not a column: its last parse report in words, set for the console's documents (knowledge.console).
    parse_summary: str

    def __str__(self) -> str:
        return self.title or self.source_uri


# TENANT_IDS: a tenant's rows by id (every search reads its hits as ``tenant_id = %s AND id = ANY(%s)``)
# through one index on (tenant, id), not the tenant alone: a new tenant's rows are unknown to the
# statistics until the table's next ANALYZE (autovacuum waits for a tenth of the table to change), and
# the planner then took the tenant index and read all of the tenant's rows for a hundred ids
# (docs/benchmarks/decisions.md, "A tenant's rows by id").


class ParentChunk(models.Model):
    """A parent passage of a ``parent_child`` version: returned by a hit on one of its child chunks,
    never searched itself (no vector, no keyword-index entry). Its own table: the chunk table's every
    search-side read and index stays as it is, and a hit reads its parent by primary key."""

    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="parents")
    kb_version = models.ForeignKey(KnowledgeBaseVersion, on_delete=models.CASCADE, related_name="parents")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)  # TENANT_IDS
    ordinal = models.PositiveIntegerField()
    content = models.TextField()
    content_hash = models.CharField(max_length=32)
    token_count = models.PositiveIntegerField()
    metadata = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes = [models.Index(fields=["tenant", "id"], name="parentchunk_tenant_id")]

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
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)  # TENANT_IDS
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
    # Who may read it: its document's ACL, else its KB's default, copied like the business fields so
    # every search filters it in the same WHERE (array overlap on a GIN index; docs/permissions.md).
    acl = ArrayField(models.CharField(max_length=200), default=public_acl, db_default=Value(list(PUBLIC_ACL)))
    # A child chunk's parent passage (parent_child versions); null in a plain version. Indexed only where set.
    parent = models.ForeignKey(
        ParentChunk, null=True, blank=True, on_delete=models.CASCADE, related_name="children", db_index=False
    )

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "id"], name="chunk_tenant_id"),
            models.Index(fields=["parent"], name="chunk_parent", condition=models.Q(parent__isnull=False)),
            models.Index(fields=["kb_version", "doc_type"], name="chunk_version_doctype"),
            models.Index(fields=["kb_version", "created_at"], name="chunk_version_created"),
            models.Index(fields=["document", "ordinal"], name="chunk_document_ordinal"),
            # No pending list (fastupdate): a filtered search would read all of it (up to 4 MB) until the
            # next vacuum, 10-15 ms after a bulk ingestion (docs/benchmarks/decisions.md, "GIN pending lists").
            GinIndex(fields=["metadata"], name="chunk_metadata_gin", opclasses=["jsonb_path_ops"], fastupdate=False),
            GinIndex(fields=["tags"], name="chunk_tags_gin", fastupdate=False),
            # The tenant first (btree_gin): a reader's ACL check reads only its tenant's rows, not every
            # tenant's public ones (docs/BENCHMARKS.md, "A graph of its own for the 10 % reader").
            GinIndex(fields=["tenant", "acl"], name="chunk_tenant_acl_gin", fastupdate=False),
            # The few chunks not open to everyone: a search learns from it at once whether its versions
            # hold any (none: the ACL check is a no-op and is left out; knowledge.selectors.search.restricted_versions).
            models.Index(
                fields=["kb_version"], name="chunk_version_restricted", condition=~models.Q(acl__contains=["*"])
            ),
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

    # Not a column: its state and progress, set for the console's progress bars (knowledge.console).
    status: dict[str, Any]

    def __str__(self) -> str:
        return f"{self.kind} {self.task_id}"


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
