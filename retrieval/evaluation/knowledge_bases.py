"""The knowledge bases an evaluation runs on: the ``eval`` tenant's (or, for a dataset with a curated
vocabulary, a tenant of its own), built from a dataset's corpus, or a tenant's own with labelled queries."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.db import transaction

from knowledge.ingestion.files import SourceFile
from knowledge.ingestion.pipeline import Ingester, IngestReport
from knowledge.knowledge_bases import get_or_create_knowledge_base
from knowledge.lexical import rebuild_lexical_index
from knowledge.models import PLAIN, KnowledgeBase
from knowledge.selectors.api import knowledge_bases_of
from knowledge.selectors.search import analyzer_for_tenant
from knowledge.stores import lexical_index
from knowledge.vocabulary import import_vocabulary_files
from retrieval.evaluation.datasets import CORPUS_LAYOUT, VOCABULARY_FOLDER, BeirDataset
from tenants.models import Tenant
from tenants.selectors import tenant_by_name
from tenants.services import get_or_create_tenant

EVAL_TENANT = "eval"


@dataclass(frozen=True)
class KbSettings:
    """What the indexes depend on; with the corpus hash it names the KB, so a change gets a new KB."""

    model: str
    languages: tuple[str, ...] | None = None  # None: what the service knows for the model
    chunk_size: int | None = None  # None: the service defaults
    chunk_overlap: int | None = None
    chunking: str = PLAIN
    parent_chunk_size: int | None = None  # parent_child only; None: the default

    def kb_name(self, dataset: BeirDataset) -> str:
        parts = [dataset.corpus_sha256, CORPUS_LAYOUT, self.model, self.languages, self.chunk_size, self.chunk_overlap]
        if self.chunking != PLAIN:  # plain KBs keep the names they had before chunkings could differ
            parts += [self.chunking, self.parent_chunk_size]
        key = json.dumps(parts)
        short_model = Path(self.model).name.lower()
        return f"{dataset.name}-{short_model}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"[:100]


def eval_tenant(dataset: BeirDataset | None = None) -> Tenant:
    """The ``eval`` tenant; a dataset with a curated vocabulary gets a tenant of its own, named by the
    vocabulary's digest and holding exactly that vocabulary (a vocabulary is the tenant's: it would
    change the other sets' tokenization and graphs)."""
    if dataset is None or not dataset.vocabulary:
        return get_or_create_tenant(EVAL_TENANT)
    name = f"{EVAL_TENANT}-{dataset.name}-{dataset.vocabulary_sha256[:8]}"
    with transaction.atomic():
        tenant = get_or_create_tenant(name)
        import_vocabulary_files(tenant, dataset.vocabulary, str(dataset.path / VOCABULARY_FOLDER))
    return tenant


def eval_knowledge_base(
    dataset: BeirDataset, kb_settings: KbSettings, name: str | None = None
) -> tuple[KnowledgeBase, bool]:
    """The evaluation KB (created when missing); refuses a same-named KB built with another model."""
    kb, created = get_or_create_knowledge_base(
        tenant=eval_tenant(dataset),
        name=name or kb_settings.kb_name(dataset),
        embedding_model=kb_settings.model,
        chunk_size=kb_settings.chunk_size,
        chunk_overlap=kb_settings.chunk_overlap,
        chunking=kb_settings.chunking,
        parent_chunk_size=kb_settings.parent_chunk_size,
        languages=list(kb_settings.languages) if kb_settings.languages is not None else None,
    )
    if kb.embedding_model != kb_settings.model:
        raise ValueError(f"knowledge base {kb.name!r} was built with {kb.embedding_model}, not {kb_settings.model}")
    return kb, created


def ingest_corpus(kb: KnowledgeBase, files: list[SourceFile], on_progress: Callable[[int], None]) -> IngestReport:
    """Ingest (unchanged files are skipped, so a reused or interrupted KB costs only what is missing),
    then rebuild the keyword index if the analyzer changed since it was built."""
    report = Ingester(kb, on_progress=on_progress).ingest(files)
    analyzer = analyzer_for_tenant(kb.tenant_id)
    version_id = kb.active_version_id
    state = lexical_index().state(version_id) if version_id is not None else None
    if state is not None and (state.analyzer_version, state.dictionary_fingerprint) != (
        analyzer.version,
        analyzer.dictionary_fingerprint,
    ):
        assert kb.active_version is not None  # its index has a state
        rebuild_lexical_index(kb.active_version)
    return report


def labelled_knowledge_base(tenant_name: str, kb_name: str) -> tuple[Tenant, KnowledgeBase]:
    """A tenant's own KB, to evaluate with its labelled queries (``TenantNotFound``, ``KnowledgeBase.DoesNotExist``)."""
    tenant = tenant_by_name(tenant_name)
    return tenant, knowledge_bases_of(tenant).get(name=kb_name)
