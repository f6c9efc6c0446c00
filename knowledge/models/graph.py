"""A KB version's knowledge graph: entities, mentions, edges, relations, curator rules, communities; read
and written by ``engines.postgres_graph`` through ``knowledge.stores.graph_store``."""

from typing import TypeVar

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.db import models

from knowledge.models.content import Chunk, KnowledgeBase, KnowledgeBaseVersion
from tenants.models import Tenant

_M = TypeVar("_M", bound=models.Model)


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


def _unchecked_key(to: type[_M], related_name: str = "+") -> "models.ForeignKey[_M, _M]":
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
    re-ingestion (``graph.curation`` writes them; ``graph.extraction.graph_curation`` reads them)."""

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
    """A community of a KB version's entity graph with its summary (``graph.community_build`` builds
    them, ``engines.community_detection`` finds them); global graph search ranks these."""

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
