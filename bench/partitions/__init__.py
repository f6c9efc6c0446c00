"""Tenant partitions of the chunk table at scale (``python -m bench.partitions``)."""
