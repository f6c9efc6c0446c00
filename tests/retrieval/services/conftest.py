"""Helpers of the search pipeline's tests: one search over a KB's tenant, its hits' file names, and
fusion settings for the stages tested without a search."""

from dataclasses import replace
from pathlib import Path

from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base
from retrieval.services.search import search
from retrieval.tuning import FusionSettings
from retrieval.types import SearchRequest
from tests.factories import TenantFactory


def small_kb(folder: Path, files: dict[str, str], name: str, terms: tuple[str, ...] = (), **kb_options):
    """A KB of a new tenant with these files (name -> text), in passages of 120 tokens unless
    ``kb_options`` say otherwise, ingested; ``terms``: the tenant's curated (protected) terms, which
    name entities a plain noun or an untagged dish name would not (鱼香肉丝)."""
    from knowledge.models import DictionaryTerm

    for file_name, text in files.items():
        (folder / file_name).write_text(text, encoding="utf-8")
    tenant = TenantFactory()
    DictionaryTerm.objects.bulk_create(DictionaryTerm(tenant=tenant, value=term) for term in terms)
    kb = create_knowledge_base(tenant=tenant, name=name, **{"chunk_size": 120, "chunk_overlap": 0, **kb_options})
    Ingester(kb).ingest(discover_files([folder]))
    return kb


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
