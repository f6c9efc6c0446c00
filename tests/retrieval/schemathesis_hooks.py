"""Hooks of the bounded full schemathesis run (tests/retrieval/test_schemathesis_full.py), loaded by the CLI
through ``SCHEMATHESIS_HOOKS``: the same allowances as test_openapi.py's valid-request test, no more.

A positive case drops the body fields whose grammar OpenAPI 3.0 cannot state (filter keys, a Dify condition's
value typed by its operator: tests/retrieval/test_filters.py and test_dify.py hold them) and the caller's
query vector (valid only with the searched KB's model and dimension: test_views_query_vector.py); a new
knowledge base's embedding model (one the service can load: a known name, a model folder, remote:<name>); and of a
parent_child knowledge base's sizes, which must agree with each other (chunk_size at most parent_chunk_size, a
rule between two fields: tests/knowledge/test_views.py)."""

from __future__ import annotations

import schemathesis
from schemathesis import GenerationMode

UNSTATABLE = ("filters", "metadata_condition", "query_vector", "embedding_model")


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    meta = case._meta
    positive = meta is None or meta.generation.mode == GenerationMode.POSITIVE
    if positive and isinstance(case.body, dict):
        for name in UNSTATABLE:
            case.body.pop(name, None)
        if case.body.get("chunking") == "parent_child":
            case.body.pop("chunk_size", None)
            case.body.pop("parent_chunk_size", None)
        elif "parent_chunk_size" in case.body:  # a parent size belongs to parent_child chunking only
            case.body.pop("parent_chunk_size")
