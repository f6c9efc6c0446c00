"""Ingestion throughput against the raw embedding rate: ``python -m bench.ingest``."""
