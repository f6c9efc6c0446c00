"""HNSW build cost, storage, recall and latency up to 1M chunks: ``python -m bench.scale``."""
