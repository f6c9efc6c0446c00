"""The models and their migrations agree: a model change without its migration fails the build."""

import importlib
import io

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_no_model_change_lacks_a_migration():
    out = io.StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out)
    except SystemExit:
        pytest.fail(f"models changed without a migration:\n{out.getvalue()}")


@pytest.mark.django_db
def test_halfvec_migration_rebuilds_an_existing_vector_index_under_its_name():
    """knowledge 0016: a deployment's ``vector`` HNSW index becomes a ``halfvec`` one (the search
    orders its graph walk by the halfvec expression), and back on reverse."""
    from types import SimpleNamespace

    from django.db import connection, transaction

    migration = importlib.import_module("knowledge.migrations.0016_chunk_embedding_halfvec_index")
    dimension = 16  # a dimension no other test indexes
    name = f"chunk_embedding_hnsw_{dimension}"

    def definition() -> str:
        with connection.cursor() as cursor:
            cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [name])
            return cursor.fetchone()[0]

    editor = SimpleNamespace(connection=connection)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                f"CREATE INDEX {name} ON knowledge_chunk USING hnsw "
                f"((embedding::vector({dimension})) vector_cosine_ops) WHERE embedding_dim = {dimension}"
            )
        migration.to_halfvec(None, editor)
        assert f"halfvec({dimension})) halfvec_cosine_ops" in definition()
        assert f"embedding_dim = {dimension}" in definition()
        migration.to_vector(None, editor)
        assert f"vector({dimension})) vector_cosine_ops" in definition()
        transaction.set_rollback(True)


@pytest.mark.django_db(transaction=True)
def test_vector_storage_migration_moves_vectors_out_of_toast_into_their_rows(settings):
    """knowledge 0023: a vector an ``external`` column put in TOAST (a ~1 KB text beside a 384-d vector
    passes the 2 KB threshold) is in its row after the migration, and the column keeps the setting;
    with the setting ``external`` the migration rewrites nothing."""
    from types import SimpleNamespace

    from django.db import connection

    from knowledge.stores import vector_index
    from tests.factories import ChunkFactory

    migration = importlib.import_module("knowledge.migrations.0023_vector_storage_in_row")
    editor = SimpleNamespace(connection=connection)

    def vectors_in_toast() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM knowledge_chunk WHERE pg_column_toast_chunk_id(embedding) IS NOT NULL")
            return cursor.fetchone()[0]

    migration.out_of_rows(None, editor)
    try:
        assert vector_index().column_storage() == "external"
        text = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(350))  # ~1 KB that barely compresses
        ChunkFactory.create_batch(3, content=text)
        assert vectors_in_toast() == 3
        settings.VECTOR_COLUMN_STORAGE = "external"  # deferred by the operator: nothing is rewritten
        migration.into_rows(None, editor)
        assert vectors_in_toast() == 3 and vector_index().column_storage() == "external"
        settings.VECTOR_COLUMN_STORAGE = "main"
        migration.into_rows(None, editor)
        assert vectors_in_toast() == 0 and vector_index().column_storage() == "main"
    finally:
        vector_index().set_column_storage("main")


@pytest.mark.django_db
def test_chunk_gin_indexes_take_new_rows_without_a_pending_list():
    """knowledge 0024: the business-field GIN indexes have ``fastupdate`` off, so new chunks go straight
    into them and a filtered search never reads a pending list; with the old setting the same rows wait
    in one (``gin_clean_pending_list`` counts the pages it merges)."""
    from django.db import connection

    from tests.factories import ChunkFactory

    indexes = importlib.import_module("knowledge.migrations.0024_chunk_gin_without_pending_list").INDEXES

    def pending_pages() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT sum(gin_clean_pending_list(name::regclass)) FROM unnest(%s::text[]) AS name", [list(indexes)]
            )
            return cursor.fetchone()[0]

    with connection.cursor() as cursor:
        cursor.execute("SELECT relname, reloptions FROM pg_class WHERE relname = ANY(%s)", [list(indexes)])
        assert dict(cursor.fetchall()) == dict.fromkeys(indexes, ["fastupdate=off"])
    ChunkFactory.create_batch(3, metadata={"shop": "north"}, tags=["promo"])
    assert pending_pages() == 0
    with connection.cursor() as cursor:  # the control: PostgreSQL's default (rolled back with the test)
        for name in indexes:
            cursor.execute(f"ALTER INDEX {name} SET (fastupdate = on)")
    ChunkFactory.create_batch(3, metadata={"shop": "south"}, tags=["promo"])
    assert pending_pages() > 0


@pytest.mark.django_db
def test_a_new_tenants_rows_are_read_by_id_before_the_statistics_know_the_tenant():
    """knowledge 0025: a search reads its hits as ``tenant_id = %s AND id = ANY(%s)``. Before the next
    ANALYZE the planner takes a new tenant for a handful of rows; with an index on the tenant alone
    (the control: the index 0025 replaced) it read all of the tenant's rows to find the ids."""
    from django.db import connection

    from tests.factories import ChunkFactory

    known, new = ChunkFactory(), ChunkFactory()  # two tenants

    def clone(chunk, copies: int) -> None:
        cursor.execute(
            """
            INSERT INTO knowledge_chunk (document_id, kb_version_id, tenant_id, knowledge_base_id, ordinal, content,
                content_hash, token_count, embedding_dim, embedding, doc_type, created_at, tags, metadata)
            SELECT document_id, kb_version_id, tenant_id, knowledge_base_id, ordinal + n, content, content_hash,
                token_count, embedding_dim, embedding, doc_type, created_at, tags, metadata
            FROM knowledge_chunk, generate_series(1, %s) AS n WHERE id = %s
            """,
            [copies, chunk.pk],
        )

    def rows_read_beyond_the_ids() -> int:
        cursor.execute("SELECT id FROM knowledge_chunk WHERE tenant_id = %s LIMIT 20", [new.tenant_id])
        ids = [row[0] for row in cursor.fetchall()]
        statement = "SELECT id, content_hash FROM knowledge_chunk WHERE tenant_id = %s AND id = ANY(%s)"
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", [new.tenant_id, ids])
        plan = cursor.fetchone()[0][0]["Plan"]
        return sum(node.get("Rows Removed by Filter", 0) for node in [plan, *plan.get("Plans", [])])

    with connection.cursor() as cursor:
        clone(known, 3000)
        cursor.execute("ANALYZE knowledge_chunk")
        clone(new, 500)  # after the statistics were taken
        assert rows_read_beyond_the_ids() == 0
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # the copies' deferred key checks: DDL refuses to wait on them
        cursor.execute("DROP INDEX chunk_tenant_id")  # the control (rolled back with the test)
        cursor.execute("CREATE INDEX chunk_tenant_only ON knowledge_chunk (tenant_id)")
        assert rows_read_beyond_the_ids() > 400


@pytest.mark.django_db
def test_relevance_calibration_migration_carries_stored_thresholds_over_to_the_calibrated_scale():
    """retrieval 0005: a KB's default ``score_threshold``, the search log's best relevance and an evaluation
    run's thresholds, stored on the raw scale, are mapped as ``relevance`` now is, so a threshold keeps the hits it kept; and back."""
    from types import SimpleNamespace

    from django.apps import apps
    from django.db import connection

    from retrieval.models import EvaluationRun, SearchLog
    from retrieval.relevance_calibration import calibrated
    from tests.factories import KnowledgeBaseFactory, SearchLogFactory

    migration = importlib.import_module("retrieval.migrations.0005_relevance_calibrated_scale")
    editor = SimpleNamespace(connection=connection, quote_name=connection.ops.quote_name)
    kb = KnowledgeBaseFactory(search_settings={"score_threshold": 0.3, "fusion": "rrf"})
    other = KnowledgeBaseFactory(search_settings={"fusion": "rrf"})
    logs = [SearchLogFactory(best_relevance=value) for value in (0.0, 0.25, 0.6)] + [
        SearchLogFactory(best_relevance=None)
    ]
    curve = {
        "threshold_keeping_90": 0.2812,
        "threshold_dropping_half_of_others": 0.1258,
        "curve": [{"threshold": 0.0, "relevant_kept": 1.0, "others_dropped": 0.0}],
    }
    run = EvaluationRun.objects.create(
        tenant=kb.tenant,
        knowledge_base=kb,
        summary={"relevance_threshold": curve, "kb_threshold": {"threshold": 0.3, "relevant_kept": 0.9}},
    )

    migration.forward(apps, editor)
    run.refresh_from_db()
    assert run.summary["relevance_threshold"]["threshold_keeping_90"] <= calibrated(0.2812)  # still keeps 90 %
    assert run.summary["relevance_threshold"]["threshold_keeping_90"] == pytest.approx(calibrated(0.2812), abs=1e-4)
    assert run.summary["relevance_threshold"]["curve"][0]["threshold"] == 0.0
    assert run.summary["kb_threshold"] == {"threshold": pytest.approx(calibrated(0.3), abs=1e-6), "relevant_kept": 0.9}
    kb.refresh_from_db()
    other.refresh_from_db()
    assert kb.search_settings == {"score_threshold": pytest.approx(calibrated(0.3), abs=1e-6), "fusion": "rrf"}
    assert other.search_settings == {"fusion": "rrf"}
    migrated = [SearchLog.objects.get(pk=log.pk).best_relevance for log in logs]
    assert migrated[0] == 0.0 and migrated[3] is None
    assert migrated[1:3] == [pytest.approx(calibrated(0.25), abs=1e-6), pytest.approx(calibrated(0.6), abs=1e-6)]

    migration.backward(apps, editor)
    kb.refresh_from_db()
    assert kb.search_settings["score_threshold"] == pytest.approx(0.3, abs=1e-5)
    assert [SearchLog.objects.get(pk=log.pk).best_relevance for log in logs[1:3]] == [
        pytest.approx(0.25, abs=1e-5),
        pytest.approx(0.6, abs=1e-5),
    ]
