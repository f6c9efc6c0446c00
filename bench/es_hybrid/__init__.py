"""Elasticsearch's own hybrid search beside the service's default hybrid (``python -m bench.es_hybrid``)."""
