"""Output shapes of the knowledge endpoints."""
from rest_framework import serializers


class DocumentCountsOutput(serializers.Serializer):
    total = serializers.IntegerField()
    by_status = serializers.DictField(child=serializers.IntegerField(), help_text="every document status, 0 when none")


class QueryCountsOutput(serializers.Serializer):
    served = serializers.IntegerField(help_text="successful searches since the counter started")
    cache_hits = serializers.IntegerField()
    cache_hit_ratio = serializers.FloatField(allow_null=True, help_text="null before the first query")


class StatsOutput(serializers.Serializer):
    tenant = serializers.CharField()
    knowledge_bases = serializers.IntegerField()
    documents = DocumentCountsOutput()
    chunks = serializers.IntegerField(help_text="searchable chunks (in the active version of each knowledge base)")
    queries = QueryCountsOutput(allow_null=True, help_text="null while the cache (Redis) is unreachable")
