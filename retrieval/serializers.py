from rest_framework import serializers

MAX_QUERY_CHARS = 2000
MAX_KB_IDS = 100


class VectorSearchInput(serializers.Serializer):
    query = serializers.CharField(max_length=MAX_QUERY_CHARS, trim_whitespace=True)
    top_k = serializers.IntegerField(min_value=1, max_value=100, default=10)
    kb_ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=2**63 - 1), required=False, max_length=MAX_KB_IDS
    )
    filters = serializers.JSONField(required=False)


class SearchHitOutput(serializers.Serializer):
    chunk_id = serializers.IntegerField()
    doc_id = serializers.IntegerField()
    kb_id = serializers.IntegerField()
    content = serializers.CharField()
    score = serializers.FloatField()
    source = serializers.CharField()
    rank = serializers.IntegerField()
    title = serializers.CharField()
    source_uri = serializers.CharField()
    doc_type = serializers.CharField()
    metadata = serializers.DictField()


class SearchOutput(serializers.Serializer):
    results = SearchHitOutput(many=True)
    total = serializers.IntegerField()
    latency_ms = serializers.FloatField()
    request_id = serializers.CharField()
