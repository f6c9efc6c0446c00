"""Model factories. Chunks get seeded random unit vectors: fast, and real rows in real pgvector."""

import factory
import numpy as np
from django.utils import timezone

from engines.embedders import DEFAULT_LOCAL_MODEL
from knowledge.models import Chunk, Document, KnowledgeBase
from knowledge.versions import activate_first_version
from retrieval.models import SearchLog
from tenants.models import RateTier, Tenant

DIMENSION = 384


def unit_vector(seed: int, dimension: int = DIMENSION) -> np.ndarray:
    vector = np.random.default_rng(seed).standard_normal(dimension).astype(np.float32)
    return vector / np.linalg.norm(vector)


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant

    name = factory.Sequence(lambda n: f"tenant-{n}")


class KnowledgeBaseFactory(factory.django.DjangoModelFactory):
    """A KB with an active version 1, as ``create_knowledge_base`` makes, without loading a model."""

    class Meta:
        model = KnowledgeBase
        skip_postgeneration_save = True

    tenant = factory.SubFactory(TenantFactory)
    name = factory.Sequence(lambda n: f"kb-{n}")
    embedding_model = DEFAULT_LOCAL_MODEL
    embedding_dim = DIMENSION
    chunk_size = 200
    chunk_overlap = 32

    @factory.post_generation
    def with_active_version(kb, create, extracted, **kwargs):
        if create:
            activate_first_version(kb)


class DocumentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Document

    knowledge_base = factory.SubFactory(KnowledgeBaseFactory)
    tenant = factory.SelfAttribute("knowledge_base.tenant")
    source_uri = factory.Sequence(lambda n: f"docs/doc-{n}.txt")
    title = factory.Sequence(lambda n: f"Document {n}")
    doc_type = "txt"
    status = Document.Status.READY


class ChunkFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Chunk

    document = factory.SubFactory(DocumentFactory)
    knowledge_base = factory.SelfAttribute("document.knowledge_base")
    kb_version = factory.SelfAttribute("document.knowledge_base.active_version")
    tenant = factory.SelfAttribute("document.tenant")
    ordinal = factory.Sequence(lambda n: n)
    content = factory.Sequence(lambda n: f"passage number {n}")
    content_hash = factory.Sequence(lambda n: f"{n:032x}")
    token_count = 3
    embedding_dim = DIMENSION
    embedding = factory.Sequence(unit_vector)
    doc_type = factory.SelfAttribute("document.doc_type")
    created_at = factory.LazyFunction(timezone.now)


def give_unlimited_rate_tier(tenant: Tenant) -> None:
    """A tier without practical limits, so a test may poll tasks as fast as it likes."""
    tenant.rate_tier = RateTier.objects.create(name=f"unlimited-{tenant.pk}", requests_per_window=10**6)
    tenant.save()


class SearchLogFactory(factory.django.DjangoModelFactory):
    """A searched query as ``retrieval.search_log`` keeps it: a hybrid search of all the tenant's KBs."""

    class Meta:
        model = SearchLog

    tenant = factory.SubFactory(TenantFactory)
    query = "firmware update"
    mode = "hybrid"
    kb_ids = factory.LazyFunction(list)
    hits = 5
    best_relevance = 0.8
    legs_disagree = False
