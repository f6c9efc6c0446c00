"""knowledge.monitoring: versions by status, the oldest build's age and each source's failed syncs in a
row, read from the database at each scrape of the real ``/metrics``."""

from __future__ import annotations

import shutil
from datetime import timedelta

import pytest
from django.utils import timezone

from knowledge.errors import InvalidSourcePath
from knowledge.knowledge_bases import create_knowledge_base
from knowledge.models import KnowledgeBaseVersion, SourceRun
from knowledge.sources import create_source, sync
from knowledge.versions import fail_version
from tests.conftest import scraped_metrics

pytestmark = pytest.mark.django_db


def gauge(client, name: str, **labels: str) -> float | None:
    return scraped_metrics(client).get(name, {}).get(frozenset(labels.items()))


@pytest.fixture
def kb(tenant, embedder):
    return create_knowledge_base(tenant=tenant, name="handbook")


def building_version(kb, started_ago: timedelta) -> KnowledgeBaseVersion:
    active = kb.active_version
    version = KnowledgeBaseVersion.objects.create(
        knowledge_base=kb, number=active.number + 1, embedding_model=active.embedding_model,
        embedding_dim=active.embedding_dim, chunk_size=active.chunk_size, chunk_overlap=active.chunk_overlap,
    )  # fmt: skip
    KnowledgeBaseVersion.objects.filter(pk=version.pk).update(created_at=timezone.now() - started_ago)
    return version


def test_versions_are_counted_by_status_every_status_included(client, kb):
    before = {status: gauge(client, "retrieval_kb_versions", status=status) for status in KnowledgeBaseVersion.Status}
    assert None not in before.values()  # a status with no version is a 0, not a missing series
    version = building_version(kb, timedelta(0))
    assert gauge(client, "retrieval_kb_versions", status="building") == before["building"] + 1
    fail_version(version.pk, "build failed: the embedder is gone")
    assert gauge(client, "retrieval_kb_versions", status="building") == before["building"]
    assert gauge(client, "retrieval_kb_versions", status="failed") == before["failed"] + 1


def test_the_oldest_build_age_is_that_of_the_longest_running_build(client, kb, tenant):
    assert gauge(client, "retrieval_version_build_oldest_age_seconds") == 0
    building_version(kb, timedelta(hours=2))
    building_version(create_knowledge_base(tenant=tenant, name="other"), timedelta(minutes=5))
    age = gauge(client, "retrieval_version_build_oldest_age_seconds")
    assert 2 * 3600 <= age < 2 * 3600 + 600


def no_progress(total: int):
    return lambda done: None


def test_failed_syncs_in_a_row_are_counted_per_source_until_one_succeeds(client, kb, settings, tmp_path):
    folder = tmp_path / "root" / "handbook"
    folder.mkdir(parents=True)
    (folder / "kettle.txt").write_text("The kettle boils 1.7 litres of water in four minutes.")
    settings.KNOWLEDGE_SOURCE_ROOTS = [str(tmp_path / "root")]
    source = create_source(kb, kind="folder", path="handbook", interval_seconds=3600)
    labels = {"knowledge_base": str(kb.pk), "source": str(source.pk)}
    assert gauge(client, "retrieval_source_sync_consecutive_failures", **labels) is None  # never ran

    assert sync(source, trigger=SourceRun.Trigger.MANUAL, start_progress=no_progress).status == "succeeded"
    assert gauge(client, "retrieval_source_sync_consecutive_failures", **labels) == 0
    moved = shutil.move(folder, tmp_path / "elsewhere")
    for _ in range(2):
        with pytest.raises(InvalidSourcePath, match="not an existing folder"):
            sync(source, trigger=SourceRun.Trigger.MANUAL, start_progress=no_progress)
    assert list(source.runs.values_list("status", flat=True)) == ["failed", "failed", "succeeded"]
    assert gauge(client, "retrieval_source_sync_consecutive_failures", **labels) == 2

    shutil.move(moved, folder)
    sync(source, trigger=SourceRun.Trigger.MANUAL, start_progress=no_progress)
    assert gauge(client, "retrieval_source_sync_consecutive_failures", **labels) == 0
