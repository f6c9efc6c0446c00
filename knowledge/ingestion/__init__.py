"""Ingestion: files in, searchable chunks out.

- ``files``: which files, their labels (sidecars, uploads), their stored originals, failed documents.
- ``pipeline``: the ``Ingester``: parse -> chunk -> embed -> write the three stores (vector, keyword, graph).
- ``chunk_rows``: documents' chunks as the vector index's rows.
- ``stored``: ingestion from stored originals, as the worker's tasks and source syncs run it.
"""
