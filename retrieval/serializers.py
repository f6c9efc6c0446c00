from rest_framework import serializers

from retrieval.types import MODES, RETRIEVERS

MAX_QUERY_CHARS = 2000
MAX_KB_IDS = 100
MAX_CANDIDATES = 200


class ExpandInput(serializers.Serializer):
    """Query expansion switches; an omitted switch takes the tenant's default."""

    synonyms = serializers.BooleanField(required=False, allow_null=True, default=None)
    spelling = serializers.BooleanField(required=False, allow_null=True, default=None)
    llm = serializers.BooleanField(required=False, allow_null=True, default=None)
    max_expansions = serializers.IntegerField(min_value=0, max_value=10, default=3)


class SearchInput(serializers.Serializer):
    query = serializers.CharField(max_length=MAX_QUERY_CHARS, trim_whitespace=True)
    top_k = serializers.IntegerField(min_value=1, max_value=100, default=10)
    kb_ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=2**63 - 1), required=False, max_length=MAX_KB_IDS
    )
    filters = serializers.JSONField(required=False)
    weights = serializers.DictField(
        child=serializers.FloatField(min_value=0, max_value=100), required=False, help_text="per retriever: vector, bm25"
    )
    candidates = serializers.IntegerField(min_value=1, max_value=MAX_CANDIDATES, required=False)
    rrf_k = serializers.IntegerField(min_value=1, max_value=1000, required=False)
    rerank = serializers.BooleanField(default=False)
    score_threshold = serializers.FloatField(
        min_value=0, max_value=1, default=0.0, help_text="drop hits whose relevance is below this (0 to 1)"
    )
    expand = ExpandInput(required=False)

    def validate_weights(self, weights):
        unknown = sorted(set(weights) - set(RETRIEVERS))
        if unknown:
            raise serializers.ValidationError(f"unknown retriever(s) {', '.join(unknown)}; use {', '.join(RETRIEVERS)}")
        return weights

    def validate(self, data):
        top_k, candidates = data["top_k"], data.get("candidates")
        if candidates is not None and candidates < top_k:
            raise serializers.ValidationError({"candidates": f"must be at least top_k ({top_k})"})
        return data


class ModeSearchInput(SearchInput):
    mode = serializers.ChoiceField(choices=MODES, default="hybrid")


class ContributionOutput(serializers.Serializer):
    rank = serializers.IntegerField()
    score = serializers.FloatField()
    query = serializers.CharField()


class SearchHitOutput(serializers.Serializer):
    chunk_id = serializers.IntegerField()
    doc_id = serializers.IntegerField()
    kb_id = serializers.IntegerField()
    content = serializers.CharField()
    score = serializers.FloatField(help_text="rerank score if reranked, else fused score; a single list's raw score")
    source = serializers.CharField()
    rank = serializers.IntegerField()
    title = serializers.CharField()
    source_uri = serializers.CharField()
    doc_type = serializers.CharField()
    metadata = serializers.DictField()
    relevance = serializers.FloatField(
        help_text="0 to 1, comparable across queries of a knowledge base: the stronger of the BM25 score over "
        "the query's highest possible one and the cosine above the KB's random-pair background"
    )
    fused_score = serializers.FloatField()
    rerank_score = serializers.FloatField(allow_null=True)
    retrievers = serializers.DictField(child=ContributionOutput())
    matched_queries = serializers.ListField(child=serializers.CharField())


class QueryOutput(serializers.Serializer):
    text = serializers.CharField()
    weight = serializers.FloatField()
    origin = serializers.CharField()


class DegradationOutput(serializers.Serializer):
    stage = serializers.CharField()
    cause = serializers.CharField()
    message = serializers.CharField()


class SearchOutput(serializers.Serializer):
    results = SearchHitOutput(many=True)
    total = serializers.IntegerField()
    mode = serializers.CharField()
    queries = QueryOutput(many=True)
    weights = serializers.DictField(child=serializers.FloatField())
    reranked = serializers.BooleanField()
    cached = serializers.BooleanField(help_text="served from the result cache")
    degraded = DegradationOutput(many=True)
    notes = serializers.ListField(child=serializers.CharField())
    candidates = serializers.DictField(child=serializers.IntegerField())
    timings_ms = serializers.DictField(child=serializers.FloatField())
    latency_ms = serializers.FloatField()
    request_id = serializers.CharField()
