"""Ingestion: files in, searchable chunks out.

- ``files``: which files, their labels (sidecars, uploads), their stored originals, failed documents.
- ``pipeline``: the ``Ingester``: parse -> chunk -> embed -> write (COPY) -> keyword index.
- ``chunk_copy``: the binary COPY that writes chunk rows.
- ``stored``: ingestion from stored originals, as the worker's tasks and source syncs run it.
"""
