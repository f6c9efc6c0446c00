"""Knowledge sources: folders under the roots and URL lists, their beat entries, and syncs run by a real
Celery worker as beat sends them (django-celery-beat's DatabaseScheduler), against the real database,
keyword index and a real web server on 127.0.0.1."""

import json
import os
from datetime import timedelta

import pytest
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask
from django_celery_beat.schedulers import DatabaseScheduler

from knowledge import tasks
from knowledge.knowledge_bases import create_knowledge_base, delete_knowledge_base
from knowledge.models import Document, KnowledgeSource, SourceRun, originals_storage
from knowledge.sources import create_source, delete_source, set_schedule, sync
from tests.conftest import client_for
from tests.factories import give_unlimited_rate_tier
from tests.peers import Website

pytestmark = [pytest.mark.slow]
TASK_TIMEOUT_S = 120


@pytest.fixture
def roots(settings, tmp_path):
    """Two source roots of the test's own; the first holds a ``handbook`` folder with two files."""
    first, second = tmp_path / "roots" / "first", tmp_path / "roots" / "second"
    (first / "handbook").mkdir(parents=True)
    second.mkdir(parents=True)
    (first / "handbook" / "lock.md").write_text("# PPR-9087 lock\n\nThe PPR-9087 lock fits doors 35 to 80 mm thick.")
    (first / "handbook" / "kettle.txt").write_text("The kettle boils 1.7 litres of water in four minutes.")
    settings.KNOWLEDGE_SOURCE_ROOTS = [str(first), str(second)]
    return first, second


@pytest.fixture
def admin_key(tenant):
    """A key with the ``admin`` scope (sources) and ``search``, on a tier without practical limits."""
    give_unlimited_rate_tier(tenant)
    return client_for(tenant, "admin", "search")


@pytest.fixture
def kb(tenant, embedder):
    return create_knowledge_base(tenant=tenant, name="handbook")


def sources_url(kb) -> str:
    return f"/api/v1/knowledge-bases/{kb.pk}/sources"


# --- registering: path rules, bodies, scope -----------------------------------------------------------


@pytest.mark.django_db
def test_a_folder_source_gets_a_beat_entry_with_its_interval(admin_key, kb, roots):
    response = admin_key.post(
        sources_url(kb), {"kind": "folder", "path": "handbook", "interval_seconds": 60}, format="json"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["path"] == str(roots[0] / "handbook") and body["schedule"] == {"interval_seconds": 60}
    assert (body["runs"], body["document_count"]) == ([], 0)
    entry = KnowledgeSource.objects.get(pk=body["id"]).periodic_task
    assert (entry.task, json.loads(entry.args), entry.enabled) == ("knowledge.tasks.sync_source", [body["id"]], True)
    assert (entry.interval.every, entry.interval.period, entry.crontab) == (60, "seconds", None)
    assert admin_key.get(sources_url(kb)).json()["results"] == [body]
    assert admin_key.get(f"{sources_url(kb)}/{body['id']}").json() == body


@pytest.mark.django_db
def test_a_url_source_gets_a_crontab_entry(admin_key, kb):
    body = {"kind": "urls", "urls": ["https://example.com/faq.html"], "crontab": "*/15 6-18 * * 1-5"}
    response = admin_key.post(sources_url(kb), body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["schedule"] == {"crontab": "*/15 6-18 * * 1-5"}
    cron = KnowledgeSource.objects.get(pk=response.json()["id"]).periodic_task.crontab
    assert (cron.minute, cron.hour, cron.day_of_week, str(cron.timezone)) == ("*/15", "6-18", "1-5", "UTC")


@pytest.mark.django_db
def test_sources_of_one_interval_share_its_schedule_row_even_one_an_old_race_doubled(kb):
    """django-celery-beat's schedules have no unique constraint; ``get_or_create`` failed on a doubled
    row (MultipleObjectsReturned). The race itself: tests/core/test_uniqueness.py."""
    older = IntervalSchedule.objects.create(every=900, period=IntervalSchedule.SECONDS)
    IntervalSchedule.objects.create(every=900, period=IntervalSchedule.SECONDS)
    sources = [
        create_source(kb, kind="urls", urls=[f"https://example.com/{n}.html"], interval_seconds=900) for n in (1, 2)
    ]
    assert [source.periodic_task.interval_id for source in sources] == [older.pk, older.pk]


@pytest.mark.django_db
def test_changing_or_deleting_a_source_changes_or_deletes_its_entry(admin_key, kb, roots):
    source = create_source(kb, kind="folder", path="handbook", interval_seconds=60)
    entry_id = source.periodic_task_id
    set_schedule(source, crontab="0 3 * * *")
    entry = PeriodicTask.objects.get(pk=entry_id)
    assert (entry.interval, entry.crontab.minute, entry.crontab.hour) == (None, "0", "3")
    assert admin_key.delete(f"{sources_url(kb)}/{source.pk}").status_code == 204
    assert not PeriodicTask.objects.filter(pk=entry_id).exists()
    another = create_source(kb, kind="urls", urls=["https://example.com/a.html"], interval_seconds=300)
    delete_knowledge_base(kb)  # a cascade takes the entry along too
    assert not PeriodicTask.objects.filter(pk=another.periodic_task_id).exists()


@pytest.mark.django_db
def test_a_source_is_changed_in_place_and_paused(admin_key, kb, celery_app):
    a, b, c = (f"https://example.com/{name}.html" for name in "abc")
    body = {"kind": "urls", "urls": [a, b], "interval_seconds": 60}
    created = admin_key.post(sources_url(kb), body, format="json").json()
    entry_id = KnowledgeSource.objects.get(pk=created["id"]).periodic_task_id
    state = {a: {"etag": '"a"'}, b: {"etag": '"b"'}}
    KnowledgeSource.objects.filter(pk=created["id"]).update(fetch_state=state)
    url = f"{sources_url(kb)}/{created['id']}"
    changed = admin_key.patch(url, {"urls": [b, c]}, format="json")
    assert (changed.status_code, changed.json()["urls"]) == (200, [b, c]), changed.content
    assert KnowledgeSource.objects.get(pk=created["id"]).fetch_state == {b: {"etag": '"b"'}}  # a's validators go
    assert admin_key.patch(url, {"crontab": "0 4 * * *"}, format="json").json()["schedule"] == {"crontab": "0 4 * * *"}
    entry = KnowledgeSource.objects.get(pk=created["id"]).periodic_task
    assert (entry.pk, entry.interval, entry.crontab.hour) == (entry_id, None, "4")  # the same beat entry

    paused = admin_key.patch(url, {"enabled": False}, format="json").json()
    assert (paused["enabled"], paused["schedule"]) == (False, {"crontab": "0 4 * * *"})
    assert entry.name not in DatabaseScheduler(app=celery_app, lazy=True).all_as_schedule()  # beat skips it
    resumed = admin_key.patch(url, {"enabled": True, "interval_seconds": 120}, format="json").json()
    assert (resumed["enabled"], resumed["schedule"]) == (True, {"interval_seconds": 120})
    assert DatabaseScheduler(app=celery_app, lazy=True).all_as_schedule()[entry.name].schedule.run_every == timedelta(
        seconds=120
    )
    assert admin_key.get(url).json() == resumed


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "non_field_errors"),
        ({"urls": ["https://example.com/a.html"]}, "urls"),  # the source is a folder
        ({"interval_seconds": 60, "crontab": "* * * * *"}, "interval_seconds"),
        ({"interval_seconds": 5}, "interval_seconds"),
        ({"crontab": "every minute"}, "crontab"),
        ({"enabled": "maybe"}, "enabled"),
    ],
)
def test_bad_changes_are_400_naming_the_field_and_change_nothing(admin_key, kb, roots, body, field):
    source = create_source(kb, kind="folder", path="handbook", interval_seconds=60)
    response = admin_key.patch(f"{sources_url(kb)}/{source.pk}", body, format="json")
    assert response.status_code == 400, response.content
    assert field in json.dumps(response.json()["error"]["details"])
    entry = PeriodicTask.objects.get(pk=source.periodic_task_id)
    assert (entry.interval.every, entry.crontab, entry.enabled) == (60, None, True)


@pytest.mark.django_db
def test_folder_paths_break_no_rule(admin_key, kb, roots, tmp_path):
    first, second = roots
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (first / "escape").symlink_to(outside, target_is_directory=True)
    (second / "manuals").mkdir()
    rules = {
        "../elsewhere": "parent_reference",
        f"{first}/handbook/../../../elsewhere": "parent_reference",
        str(outside): "outside_roots",
        "/etc": "outside_roots",
        "escape": "symlink_escape",
        "missing": "not_a_folder",
    }
    for path, rule in rules.items():
        response = admin_key.post(
            sources_url(kb), {"kind": "folder", "path": path, "interval_seconds": 60}, format="json"
        )
        assert response.status_code == 400, (path, response.content)
        error = response.json()["error"]
        assert (error["code"], error["details"]["rule"]) == ("invalid_source_path", rule), path
        assert error["message"] and error["request_id"]
    assert (
        not KnowledgeSource.objects.exists() and not PeriodicTask.objects.filter(task=tasks.sync_source.name).exists()
    )
    in_second = {"kind": "folder", "path": str(second / "manuals"), "interval_seconds": 60}  # any root, absolute
    assert admin_key.post(sources_url(kb), in_second, format="json").status_code == 201


@pytest.mark.django_db
def test_another_tenants_folder_stays_theirs(admin_key, kb, roots):
    from tests.factories import KnowledgeBaseFactory

    create_source(KnowledgeBaseFactory(), kind="folder", path="handbook", interval_seconds=60)
    response = admin_key.post(
        sources_url(kb), {"kind": "folder", "path": str(roots[0]), "interval_seconds": 60}, format="json"
    )
    assert (response.status_code, response.json()["error"]["details"]["rule"]) == (400, "taken")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "folder", "path": "handbook"}, "interval_seconds"),
        ({"kind": "folder", "path": "handbook", "interval_seconds": 60, "crontab": "* * * * *"}, "interval_seconds"),
        ({"kind": "folder", "path": "handbook", "crontab": "every minute"}, "crontab"),
        ({"kind": "folder", "path": "handbook", "interval_seconds": 1}, "interval_seconds"),
        ({"kind": "folder", "urls": ["https://example.com/"], "interval_seconds": 60}, "path"),
        ({"kind": "urls", "urls": ["ftp://example.com/a.txt"], "interval_seconds": 60}, "urls"),
        ({"kind": "urls", "urls": [], "interval_seconds": 60}, "urls"),
        ({"kind": "disk", "path": "handbook", "interval_seconds": 60}, "kind"),
    ],
)
def test_bad_bodies_are_400_naming_the_field(admin_key, kb, roots, body, field):
    response = admin_key.post(sources_url(kb), body, format="json")
    assert response.status_code == 400, response.content
    assert field in json.dumps(response.json()["error"]["details"])


@pytest.mark.django_db
def test_sources_need_the_admin_scope_and_stay_in_their_tenant(tenant, kb, roots):
    source = create_source(kb, kind="folder", path="handbook", interval_seconds=60)
    ingest_key = client_for(tenant, "ingest", "search")
    for method, url in [
        ("get", sources_url(kb)),
        ("post", sources_url(kb)),
        ("patch", f"{sources_url(kb)}/{source.pk}"),
        ("delete", f"{sources_url(kb)}/{source.pk}"),
        ("post", f"{sources_url(kb)}/{source.pk}/sync"),
    ]:
        response = getattr(ingest_key, method)(url, {}, format="json")
        assert (response.status_code, response.json()["error"]["code"]) == (403, "insufficient_scope"), (method, url)
    from tests.factories import TenantFactory

    stranger = client_for(TenantFactory(), "admin")
    assert stranger.get(sources_url(kb)).json()["error"]["code"] == "knowledge_base_not_found"
    other_kb = create_knowledge_base(tenant=tenant, name="other")
    missing = client_for(tenant, "admin").delete(f"{sources_url(other_kb)}/{source.pk}")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "source_not_found")
    admin = client_for(tenant, "admin")
    elsewhere = admin.patch(f"{sources_url(other_kb)}/{source.pk}", {"enabled": False}, format="json")
    assert (elsewhere.status_code, elsewhere.json()["error"]["code"]) == (404, "source_not_found")
    assert KnowledgeSource.objects.get(pk=source.pk).periodic_task.enabled
    assert KnowledgeSource.objects.filter(pk=source.pk).exists()


# --- syncing on the worker, sent as beat sends it -------------------------------------------------------


def beat_sends(celery_app, source: KnowledgeSource) -> dict:
    """What beat does when the source's entry is due: the DatabaseScheduler reads the entry from the
    database and sends its task; returns the task's result once the worker ran it."""
    scheduler = DatabaseScheduler(app=celery_app, lazy=True)
    entry = scheduler.all_as_schedule()[source.periodic_task.name]
    return scheduler.apply_async(entry, advance=False).get(timeout=TASK_TIMEOUT_S)


def bm25_hits(tenant, kb, query: str) -> list[str]:
    body = {"query": query, "kb_ids": [kb.pk], "top_k": 10}
    response = client_for(tenant).post("/api/v1/retrieval/bm25", body, format="json")
    assert response.status_code == 200, response.content
    return [hit["content"] for hit in response.json()["results"]]


@pytest.mark.django_db(transaction=True)
def test_an_edited_file_is_picked_up_by_the_scheduled_sync(celery_app, celery_worker, tenant, kb, roots, admin_key):
    folder = roots[0] / "handbook"
    source = create_source(kb, kind="folder", path="handbook", interval_seconds=60)

    first = beat_sends(celery_app, source)
    assert {name: first[name] for name in ("added", "replaced", "unchanged", "removed", "failed")} == {
        "added": 2, "replaced": 0, "unchanged": 0, "removed": 0, "failed": 0,
    }  # fmt: skip
    lock = Document.objects.get(knowledge_base=kb, source_uri="handbook/lock.md")
    assert (lock.status, lock.source_id) == (Document.Status.READY, source.pk)
    assert any("35 to 80 mm" in hit for hit in bm25_hits(tenant, kb, "PPR-9087 doors"))

    (folder / "lock.md").write_text("# PPR-9087 lock\n\nThe PPR-9087 lock now fits doors 30 to 90 mm thick.")
    second = beat_sends(celery_app, source)
    assert (second["added"], second["replaced"], second["unchanged"]) == (0, 1, 1)
    hits = bm25_hits(tenant, kb, "PPR-9087 doors")
    assert any("30 to 90 mm" in hit for hit in hits) and not any("35 to 80 mm" in hit for hit in hits)
    assert Document.objects.get(pk=lock.pk).chunks.count() == Document.objects.get(pk=lock.pk).chunk_count > 0

    runs = admin_key.get(f"{sources_url(kb)}/{source.pk}").json()["runs"]
    assert [(run["trigger"], run["status"], run["replaced"]) for run in runs] == [
        ("schedule", "succeeded", 1), ("schedule", "succeeded", 0),
    ]  # fmt: skip
    assert all(run["finished_at"] >= run["started_at"] for run in runs)


@pytest.mark.django_db(transaction=True)
def test_a_file_gone_leaves_search_at_once_and_is_purged_after_the_grace(
    celery_app, celery_worker, tenant, kb, roots, settings
):
    folder = roots[0] / "handbook"
    source = create_source(kb, kind="folder", path="handbook", interval_seconds=60)
    beat_sends(celery_app, source)
    kettle = Document.objects.get(knowledge_base=kb, source_uri="handbook/kettle.txt")
    original = kettle.original

    (folder / "kettle.txt").unlink()
    result = beat_sends(celery_app, source)
    assert (result["removed"], result["unchanged"]) == (1, 1)
    kettle.refresh_from_db()
    assert (kettle.status, kettle.chunk_count, kettle.chunks.count()) == (Document.Status.REMOVED, 0, 0)
    assert bm25_hits(tenant, kb, "kettle litres") == []
    assert tasks.purge_removed_documents.delay().get(timeout=TASK_TIMEOUT_S) == 0  # within the grace period

    (folder / "kettle.txt").write_text("The kettle boils 1.7 litres of water in four minutes.")
    back = beat_sends(celery_app, source)
    assert back["added"] == 1
    kettle.refresh_from_db()  # the same document again, searchable
    assert (kettle.status, kettle.removed_at) == (Document.Status.READY, None)
    assert bm25_hits(tenant, kb, "kettle litres")

    (folder / "kettle.txt").unlink()
    beat_sends(celery_app, source)
    Document.objects.filter(pk=kettle.pk).update(
        removed_at=timezone.now() - timedelta(hours=settings.SOURCE_REMOVAL_GRACE_HOURS + 1)
    )
    assert tasks.purge_removed_documents.delay().get(timeout=TASK_TIMEOUT_S) == 1
    assert not Document.objects.filter(pk=kettle.pk).exists()
    assert not originals_storage().exists(original)


@pytest.mark.django_db(transaction=True)
def test_sync_now_is_a_task_the_tenant_follows(celery_worker, tenant, kb, roots, admin_key):
    from tests.knowledge.test_views import poll

    source = create_source(kb, kind="folder", path="handbook", crontab="0 3 * * *")
    (roots[0] / "handbook" / "broken.pdf").write_bytes(b"%PDF-1.4 not a pdf")
    response = admin_key.post(f"{sources_url(kb)}/{source.pk}/sync")
    assert response.status_code == 202, response.content
    queued = response.json()
    assert queued["source"] == source.pk
    final = poll(admin_key, queued["status_url"])[-1]
    assert final["state"] == "SUCCESS", final
    assert (final["kind"], final["result"]["added"], final["result"]["failed"]) == ("sync_source", 2, 1)
    assert final["progress"] == {"done": 3, "total": 3, "unit": "documents"}
    run = SourceRun.objects.get(source=source)
    assert (run.trigger, run.status, run.failed) == ("manual", "succeeded", 1)
    assert run.failures[0]["name"] == "handbook/broken.pdf" and run.failures[0]["error"]


@pytest.mark.django_db(transaction=True)
def test_a_symlink_out_of_the_roots_is_not_read(celery_app, celery_worker, kb, roots, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("The vault code is 4711.")
    os.symlink(secret, roots[0] / "handbook" / "vault.txt")
    source = create_source(kb, kind="folder", path="handbook", interval_seconds=60)
    result = beat_sends(celery_app, source)
    assert (result["added"], result["failed"]) == (2, 1)
    assert result["failures"] == [
        {"name": "handbook/vault.txt", "error": "a symbolic link out of the source roots (not read)"}
    ]
    assert not Document.objects.filter(
        knowledge_base=kb, status=Document.Status.READY, source_uri__endswith="vault.txt"
    ).exists()


@pytest.mark.django_db(transaction=True)
def test_url_sources_fetch_conditionally_and_follow_their_pages(celery_app, celery_worker, tenant, kb, settings):
    settings.SOURCE_URL_ALLOWED_NETWORKS = ["127.0.0.1/32"]  # the test site; public addresses need no entry
    with Website() as site:
        site.pages["/faq.html"] = (b"<html><body><p>Orders ship within two days.</p></body></html>", "text/html")
        site.pages["/notes"] = (b"Gift wrapping costs three euros.", "text/plain")
        urls = [f"{site.url}/faq.html", f"{site.url}/notes"]
        source = create_source(kb, kind="urls", urls=urls, interval_seconds=300)

        first = beat_sends(celery_app, source)
        assert (first["added"], first["failed"]) == (2, 0)
        assert {doc.source_uri: doc.doc_type for doc in Document.objects.filter(knowledge_base=kb)} == {
            urls[0]: "html", urls[1]: "txt",
        }  # fmt: skip
        assert any("two days" in hit for hit in bm25_hits(tenant, kb, "orders ship"))

        site.requests.clear()
        again = beat_sends(celery_app, source)
        assert (again["unchanged"], again["added"], again["replaced"]) == (2, 0, 0)
        assert all("if-none-match" in request.headers for request in site.requests)  # 304s: nothing downloaded

        site.pages["/faq.html"] = (b"<html><body><p>Orders ship within one day.</p></body></html>", "text/html")
        del site.pages["/notes"]
        edited = beat_sends(celery_app, source)
        assert (edited["replaced"], edited["removed"], edited["unchanged"]) == (1, 1, 0)
        assert any("one day" in hit for hit in bm25_hits(tenant, kb, "orders ship"))
        assert Document.objects.get(source_uri=urls[1]).status == Document.Status.REMOVED

        settings.SOURCE_URL_ALLOWED_NETWORKS = []
        refused = beat_sends(celery_app, source)
        assert refused["failed"] == 2 and all("non-public address" in f["error"] for f in refused["failures"])
        assert Document.objects.get(source_uri=urls[0]).status == Document.Status.READY  # kept until it is gone


def no_progress(total: int):
    return lambda done: None


@pytest.mark.django_db
def test_a_url_dropped_from_the_list_leaves_search_at_the_next_sync(admin_key, tenant, kb, settings):
    settings.SOURCE_URL_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    with Website() as site:
        site.pages["/faq.html"] = (b"<html><body><p>Orders ship within two days.</p></body></html>", "text/html")
        site.pages["/gifts.txt"] = (b"Gift wrapping costs three euros.", "text/plain")
        urls = [f"{site.url}/faq.html", f"{site.url}/gifts.txt"]
        source = create_source(kb, kind="urls", urls=urls, interval_seconds=300)
        assert sync(source, trigger=SourceRun.Trigger.MANUAL, start_progress=no_progress).added == 2
        assert any("three euros" in hit for hit in bm25_hits(tenant, kb, "gift wrapping"))

        admin_key.patch(f"{sources_url(kb)}/{source.pk}", {"urls": urls[:1]}, format="json")
        source.refresh_from_db()
        run = sync(source, trigger=SourceRun.Trigger.MANUAL, start_progress=no_progress)
        assert (run.removed, run.unchanged) == (1, 1)
        assert Document.objects.get(source_uri=urls[1]).status == Document.Status.REMOVED
        assert not any("three euros" in hit for hit in bm25_hits(tenant, kb, "gift wrapping"))


@pytest.mark.django_db(transaction=True)  # the scheduler closes stale database connections, as beat does
def test_beat_keeps_the_configured_entries_beside_the_sources(celery_app, kb, roots):
    source = create_source(kb, kind="folder", path="handbook", interval_seconds=60)
    scheduler = DatabaseScheduler(app=celery_app, lazy=True)
    scheduler.setup_schedule()  # what beat does when it starts: CELERY_BEAT_SCHEDULE into the database
    entries = scheduler.all_as_schedule()
    assert entries["purge-old-versions"].task == "knowledge.tasks.purge_versions"
    assert entries["purge-removed-documents"].task == "knowledge.tasks.purge_removed_documents"
    assert entries["purge-old-versions"].schedule.run_every == timedelta(hours=1)
    assert entries[source.periodic_task.name].schedule.run_every == timedelta(seconds=60)
    delete_source(source)
    assert source.periodic_task.name not in DatabaseScheduler(app=celery_app, lazy=True).all_as_schedule()


@pytest.mark.django_db(transaction=True)
def test_a_source_deleted_before_its_sync_is_skipped(celery_worker, kb, roots):
    source = create_source(kb, kind="folder", path="handbook", interval_seconds=60)
    source_id = source.pk
    delete_source(source)
    result = tasks.sync_source.delay(source_id).get(timeout=TASK_TIMEOUT_S)
    assert result == {"skipped": "the source was deleted"}


@pytest.mark.django_db
def test_a_sync_requested_twice_with_one_key_queues_one_task(admin_key, kb, roots, django_capture_on_commit_callbacks):
    from knowledge.models import KnowledgeTask

    source = create_source(kb, kind="folder", path="handbook", interval_seconds=60)
    with django_capture_on_commit_callbacks(execute=False):  # queued, never sent: no worker needed
        first = admin_key.post(f"{sources_url(kb)}/{source.pk}/sync", HTTP_IDEMPOTENCY_KEY="sync-1")
        again = admin_key.post(f"{sources_url(kb)}/{source.pk}/sync", HTTP_IDEMPOTENCY_KEY="sync-1")
    assert first.status_code == again.status_code == 202 and again.json() == first.json()
    assert KnowledgeTask.objects.filter(knowledge_base=kb, kind=KnowledgeTask.Kind.SYNC_SOURCE).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_beat_process_picks_up_an_edited_file(celery_worker, tenant, kb, roots, tmp_path):
    """``celery beat`` as ``./run serve`` starts it (DatabaseScheduler, a process of its own, on the test
    database) sends a 10-second source's syncs to the worker; an edited file reaches search."""
    import subprocess
    import sys

    from tests.concurrency import wait_until
    from tests.conftest import database_url_of_this_run
    from tests.knowledge.test_tasks import ROOT

    source = create_source(kb, kind="folder", path="handbook", interval_seconds=10)
    command = [
        sys.executable, "-m", "celery", "-A", "retrieval_site", "beat",
        "--scheduler", "django_celery_beat.schedulers:DatabaseScheduler", "--pidfile", str(tmp_path / "beat.pid"),
    ]  # fmt: skip
    environment = {**os.environ, "DATABASE_URL": database_url_of_this_run(), "LOG_LEVEL": "WARNING"}
    log_path = tmp_path / "beat.log"

    def wait_for_run(done) -> SourceRun:
        def finished_run() -> SourceRun | None:
            assert beat.poll() is None, log_path.read_text()
            run = SourceRun.objects.filter(source=source, status="succeeded").order_by("-id").first()
            return run if run is not None and done(run) else None

        return wait_until(finished_run, timeout=90, interval=0.5, message=f"such a run (beat's log: {log_path})")

    with open(log_path, "ab") as log:
        beat = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_run(lambda run: run.added == 2)
        (roots[0] / "handbook" / "lock.md").write_text(
            "# PPR-9087 lock\n\nThe PPR-9087 lock now fits doors 30 to 90 mm."
        )
        run = wait_for_run(lambda run: run.replaced == 1)
    finally:
        beat.terminate()
        beat.wait(timeout=30)
    assert run.trigger == "schedule" and run.unchanged == 1
    assert any("30 to 90 mm" in hit for hit in bm25_hits(tenant, kb, "PPR-9087 doors"))
