"""Crash safety of the commit protocol of rows and keyword index (knowledge.lexical): a real
``manage.py ingest`` process is killed with SIGKILL at each boundary (``CRASH_TEST_PAUSE_AT`` makes it
wait there: ``core.faults``). Right after the kill no search answers with a chunk the database does not
hold and ``check_kb`` reports what is not indexed yet; after the next run of the same ingestion (or
``check_kb --repair``) the index holds exactly the committed chunks."""

import io
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from engines import get_lexical_index
from engines.base import LexicalIndexError
from knowledge.documents import delete_document
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base
from knowledge.models import Chunk, Document, KnowledgeBaseVersion, PendingLexicalChange
from retrieval.services.search import search
from retrieval.types import SearchRequest
from tenants.services import create_tenant
from tests.pgbouncer import through

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

BASE_DIR = Path(settings.BASE_DIR)
TENANT, KB = "crash-tenant", "crash"


def paragraphs(word: str, count: int) -> str:
    """``count`` short paragraphs naming ``word``: several chunks."""
    return "\n\n".join(f"Paragraph {i} tells of the {word} number {i}, far out at sea." for i in range(count))


def ingest_process(folder: Path, pause_at: str = "") -> subprocess.Popen:
    """``manage.py ingest`` in a process of its own, on this test's database and keyword indexes."""
    params = connection.get_connection_params()
    port = f":{params['port']}" if params.get("port") else ""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "retrieval_site.settings",
        "DATABASE_URL": f"postgres://{params['user']}@{quote(params['host'], safe='')}{port}/{params['dbname']}",
        # through pgbouncer as this test's connection is (database_route): the pooled settings
        "DATABASE_POOLED": "true" if connection.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS") else "false",
        "LEXICAL_INDEX_DIR": str(settings.LEXICAL_INDEX_DIR),
        # The keyword index this test runs on: embedded tantivy, or the run's real Elasticsearch node.
        "ELASTICSEARCH_URL": settings.ELASTICSEARCH_URL,
        "ELASTICSEARCH_INDEX_PREFIX": settings.ELASTICSEARCH_INDEX_PREFIX,
        "CRASH_TEST_PAUSE_AT": pause_at,
        "FAULT_INJECTION": "1",
        "LOG_LEVEL": "WARNING",
    }
    command = [sys.executable, "manage.py", "ingest", str(folder), "--tenant", TENANT, "--kb", KB, "--no-progress"]
    return subprocess.Popen(
        command, cwd=BASE_DIR, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def kill_ingestion_at(boundary: str, folder: Path) -> None:
    process = ingest_process(folder, boundary)
    output = []
    for line in process.stderr:
        output.append(line)
        if line.strip() == f"paused at {boundary}":
            process.kill()
            break
    process.wait()
    assert process.returncode == -signal.SIGKILL, "".join(output)


def ingest_to_the_end(folder: Path) -> None:
    process = ingest_process(folder)
    _, errors = process.communicate()
    assert process.returncode == 0, errors


def rows(version: KnowledgeBaseVersion) -> set[int]:
    return set(Chunk.objects.filter(kb_version=version).values_list("id", flat=True))


def assert_index_holds_the_rows(version: KnowledgeBaseVersion) -> None:
    entries = Counter(get_lexical_index().chunk_ids(version.pk))
    assert set(entries) == rows(version)
    assert set(entries.values()) == {1}


def bm25_chunk_ids(tenant, query: str) -> set[int]:
    return {hit.chunk_id for hit in search(tenant, SearchRequest(query=query, mode="bm25", top_k=50)).results}


def check_kb(**options) -> str:
    out = io.StringIO()
    call_command("check_kb", kb=KB, stdout=out, **options)
    return out.getvalue()


@pytest.fixture(params=["tantivy", "elasticsearch"])
def keyword_engine(request, settings):
    """The crash protocol holds on both keyword engines: tantivy on disk, and a real Elasticsearch node
    (indexes of this test's own prefix, dropped after)."""
    if request.param == "tantivy":
        yield request.param
        return
    import uuid

    settings.ELASTICSEARCH_URL = request.getfixturevalue("elasticsearch_url")
    settings.ELASTICSEARCH_INDEX_PREFIX = f"test-crash-{uuid.uuid4().hex[:10]}"
    get_lexical_index.cache_clear()
    yield request.param
    client = get_lexical_index().client  # type: ignore[attr-defined]
    names = list(client.indices.get_alias(index=f"{settings.ELASTICSEARCH_INDEX_PREFIX}-*", expand_wildcards="all"))
    if names:
        client.options(ignore_status=404).indices.delete(index=",".join(names))
    settings.ELASTICSEARCH_URL = ""
    get_lexical_index.cache_clear()


@pytest.fixture
def ingested(tmp_path, embedder, keyword_engine):
    """A KB holding fleet.txt about walruses (several chunks, indexed), the file now rewritten about
    zeppelins (one more chunk) for an ingestion to be killed; returns the tenant, version and folder."""
    tenant = create_tenant(TENANT)
    kb = create_knowledge_base(tenant=tenant, name=KB, chunk_size=20, chunk_overlap=0)
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "fleet.txt").write_text(paragraphs("walrus", 10))
    Ingester(kb).ingest(discover_files([folder]))
    assert len(rows(kb.active_version)) > 1
    assert_index_holds_the_rows(kb.active_version)
    (folder / "fleet.txt").write_text(paragraphs("zeppelin", 11))
    return tenant, kb.active_version, folder


@pytest.fixture(params=["direct", pytest.param("pgbouncer", marks=pytest.mark.pooler)])
def database_route(request):
    """The test's and the ingestion process's connections straight to PostgreSQL, or through a real
    pgbouncer in transaction mode (the kill then ends a client of the pooler, not of the server)."""
    if request.param == "direct":
        yield
        return
    with through(request.getfixturevalue("pgbouncer")):
        yield


@pytest.mark.parametrize("boundary", ["rows_written", "rows_committed", "index_committed"])
def test_a_killed_ingestion_leaves_the_keyword_index_equal_to_the_rows(boundary, database_route, ingested):
    tenant, version, folder = ingested
    before = rows(version)
    kill_ingestion_at(boundary, folder)

    committed = boundary != "rows_written"
    assert (rows(version) != before) is committed
    assert PendingLexicalChange.objects.filter(kb_version=version).exists() is committed
    assert bm25_chunk_ids(tenant, "walrus zeppelin") <= rows(version)  # never a chunk that is gone
    if committed:  # a change committed, maybe not indexed yet
        with pytest.raises(CommandError, match="run with --repair"):
            check_kb()
    else:  # the index was never touched
        assert check_kb().startswith("ok ")
        assert_index_holds_the_rows(version)
        assert bm25_chunk_ids(tenant, "walrus") == before

    ingest_to_the_end(folder)  # the next run applies what the kill left pending (or ingests anew)
    assert not PendingLexicalChange.objects.filter(kb_version=version).exists()
    assert_index_holds_the_rows(version)
    assert bm25_chunk_ids(tenant, "zeppelin") == rows(version)
    assert bm25_chunk_ids(tenant, "walrus") == set()


def test_check_kb_repair_catches_up_after_a_kill_between_the_commit_and_the_index_write(ingested):
    """What ``./run serve`` does at startup after a crash."""
    tenant, version, folder = ingested
    kill_ingestion_at("rows_committed", folder)
    assert bm25_chunk_ids(tenant, "zeppelin") == set()  # committed rows, not indexed yet
    assert check_kb(repair=True).startswith("REPAIRED ")
    assert_index_holds_the_rows(version)
    assert bm25_chunk_ids(tenant, "zeppelin") == rows(version)
    assert check_kb().startswith("ok ")


@pytest.fixture
def unreachable_keyword_index(settings):
    """The keyword index on an Elasticsearch that refuses connections (nothing listens on port 1);
    call the fixture's value to get the test's own keyword engine back."""
    engine_url = settings.ELASTICSEARCH_URL

    def restore() -> None:
        settings.ELASTICSEARCH_URL = engine_url
        get_lexical_index.cache_clear()

    settings.ELASTICSEARCH_URL = "http://127.0.0.1:1"
    get_lexical_index.cache_clear()
    yield restore
    restore()


def test_an_index_write_failing_after_the_commit_is_caught_up_by_the_next_run(ingested, unreachable_keyword_index):
    tenant, version, folder = ingested
    before = rows(version)
    kb = version.knowledge_base
    with pytest.raises(LexicalIndexError):
        Ingester(kb).ingest(discover_files([folder]))
    assert rows(version) != before  # the rows are committed, their index entries pending
    assert PendingLexicalChange.objects.filter(kb_version=version).exists()

    unreachable_keyword_index()
    assert bm25_chunk_ids(tenant, "walrus zeppelin") == set()  # old entries dropped, new ones not indexed yet
    report = Ingester(kb).ingest(discover_files([folder]))
    assert report.unchanged == 1
    assert_index_holds_the_rows(version)
    assert bm25_chunk_ids(tenant, "zeppelin") == rows(version)


def test_a_delete_whose_index_write_fails_leaves_entries_searches_drop(ingested, unreachable_keyword_index):
    tenant, version, _ = ingested
    with pytest.raises(LexicalIndexError):
        delete_document(Document.objects.get(knowledge_base=version.knowledge_base))
    assert rows(version) == set()
    unreachable_keyword_index()
    assert get_lexical_index().chunk_ids(version.pk)  # the deleted chunks' entries are still there
    assert bm25_chunk_ids(tenant, "walrus") == set()
    assert check_kb(repair=True).startswith("REPAIRED ")
    assert get_lexical_index().chunk_ids(version.pk) == []
