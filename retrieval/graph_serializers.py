"""``/graph``'s own input and its ``global`` answer: communities ranked by their summaries."""

from typing import Any

from rest_framework import serializers

from core.fields import StrictIntegerField
from knowledge.serializers import CostOutput
from retrieval.serializers import DegradationOutput, SearchInput

MAX_COMMUNITY_LEVEL = 3


class GraphSearchInput(SearchInput):
    """``/graph``: ``local`` (default) ranks passages like ``mode: "graph"``; ``global`` ranks the KBs'
    communities by their summaries (only ``query``, ``top_k``, ``kb_ids``, ``filters`` and ``level`` apply)."""

    scope = serializers.ChoiceField(
        choices=["local", "global"], default="local", help_text="global: communities for corpus-wide questions"
    )
    level = StrictIntegerField(
        min_value=0,
        max_value=MAX_COMMUNITY_LEVEL,
        default=0,
        help_text="global: the community level to rank (0: the coarsest)",
    )


class CommunityChunkOutput(serializers.Serializer[Any]):
    chunk_id = serializers.IntegerField(
        help_text="the community's chunk; in a parent_child knowledge base, a child of the passage shown"
    )
    doc_id = serializers.IntegerField()
    title = serializers.CharField()
    source_uri = serializers.CharField()
    parent_id = serializers.IntegerField(allow_null=True, help_text="parent_child: the passage shown; else null")
    content = serializers.CharField(help_text="the chunk's text; in a parent_child knowledge base, its parent's")


class CommunityContributionOutput(serializers.Serializer[Any]):
    rank = serializers.IntegerField()
    score = serializers.FloatField()


class CommunityOutput(serializers.Serializer[Any]):
    kb_id = serializers.IntegerField()
    level = serializers.IntegerField()
    number = serializers.IntegerField(help_text="unique per KB version and level")
    parent = serializers.IntegerField(allow_null=True, help_text="the number of the community one level up")  # type: ignore[assignment]  # a declared field: DRF's serializer metaclass takes it off the class
    rank = serializers.IntegerField()
    score = serializers.FloatField(help_text="fused score (weighted RRF of BM25 and cosine over summaries)")
    summary = serializers.CharField()
    key_entities = serializers.ListField(child=serializers.CharField(), help_text="the most central first")
    size = serializers.IntegerField(help_text="entities in the community")
    retrievers = serializers.DictField(child=CommunityContributionOutput(), help_text="bm25 and/or vector")
    chunks = CommunityChunkOutput(many=True, help_text="supporting passages that pass the filters")


class GlobalGraphOutput(serializers.Serializer[Any]):
    scope = serializers.ChoiceField(choices=["global"])
    communities = CommunityOutput(many=True)
    total = serializers.IntegerField()
    candidates = serializers.IntegerField(help_text="communities ranked")
    degraded = DegradationOutput(many=True)
    timings_ms = serializers.DictField(child=serializers.FloatField())
    cost = CostOutput(help_text="what this answer consumed, priced by the COST_PRICE_* settings")
    latency_ms = serializers.FloatField()
    request_id = serializers.CharField()
