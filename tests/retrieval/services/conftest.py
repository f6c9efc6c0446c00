"""Helpers of the search pipeline's tests: one search over a KB's tenant, its hits' file names, and
fusion settings for the stages tested without a search."""

from dataclasses import replace
from pathlib import Path

from retrieval.services.search import search
from retrieval.tuning import FusionSettings
from retrieval.types import SearchRequest


def run(kb_or_tenant, query, **options):
    tenant = getattr(kb_or_tenant, "tenant", kb_or_tenant)
    return search(tenant, SearchRequest(query=query, **options))


def hit_names(hits) -> list[str]:
    return [Path(hit.source_uri).name for hit in hits]


def names(response) -> list[str]:
    return hit_names(response.results)


def fusion_settings(**changes) -> FusionSettings:
    """The service's defaults of a plain search (RRF with fixed weights over each leg's own hits), changed."""
    plain = FusionSettings(
        weights={}, fusion="rrf", leg_weights="fixed", leg_candidates="own", rrf_k=60, candidates=100,
        dense_weight_floor=0.0, aggregate="none", group_by="chunk", feedback_docs=0, feedback_terms=10,
        feedback_query_weight=0.5,
    )  # fmt: skip
    return replace(plain, **changes)
