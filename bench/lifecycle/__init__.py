"""The knowledge lifecycle through the real service (API, Celery, versions): ``python -m bench.lifecycle``."""
