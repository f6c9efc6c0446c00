"""What makes cached answers expire: a version's revision (chunks changed) and a tenant's vocabulary
stamp (synonyms or protected terms changed). The search cache key names both."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import F

from core.replicas import record_write, replica_aliases
from knowledge.models import KnowledgeBaseVersion
from tenants.services import stamp_vocabulary_change


def bump_revisions(version_ids: Iterable[int]) -> None:
    """A new revision for each version whose content changed; its tenant's searches read it on the
    primary until a read replica has replayed it (``core.replicas``)."""
    versions = KnowledgeBaseVersion.objects.filter(pk__in=list(version_ids))
    versions.update(revision=F("revision") + 1)
    if replica_aliases():
        for tenant_id in set(versions.values_list("knowledge_base__tenant_id", flat=True)):
            record_write(tenant_id)


def expire_cached_answers(tenant_id: int) -> None:
    """After a change to how a tenant's queries are answered that leaves its chunks alone: every process
    reads the new vocabulary (``knowledge.selectors.search.tenant_vocabulary``) and no cached answer is reused."""
    stamp_vocabulary_change(tenant_id)
    record_write(tenant_id)
