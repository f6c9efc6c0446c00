"""Vector search latency over HTTP at 100k chunks and HNSW recall: ``python -m bench.vector_search``."""
