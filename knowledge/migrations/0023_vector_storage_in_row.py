"""The chunk table's vectors move into their rows: the vector column gets ``VECTOR_COLUMN_STORAGE``
(now ``main``: in the row, out of line only when a row cannot fit a page, e.g. 4,000 dimensions) and,
when rows written before still keep their vector in TOAST, ``VACUUM FULL knowledge_chunk`` rewrites the
table and rebuilds its indexes (the HNSW graphs included). An exact filtered scan then reads each
vector from the row it already visits instead of one TOAST lookup per row (docs/benchmarks/decisions.md,
"Vector storage in the row").

The rewrite holds an exclusive lock on the table (searches and ingestion wait): 69 s for 100k chunks
and their 11 indexes, the HNSW graph included, on 2 cores at load 15 (2026-12-03); it needs free disk
for a second copy of the table and its indexes. To defer it, set ``VECTOR_COLUMN_STORAGE=external`` before migrating (nothing is
rewritten; new rows still follow the setting) and run ``VACUUM FULL knowledge_chunk`` in a quiet hour
after setting it to ``main``. Reversing puts the column back to ``external`` and rewrites nothing.
"""

from django.conf import settings
from django.db import migrations

IN_ROW = ("main", "plain")


def _vectors_in_toast(cursor) -> bool:
    """Whether a row keeps its vector out of line (PostgreSQL 17+ can tell; before, any row counts)."""
    cursor.execute("SELECT current_setting('server_version_num')::int >= 170000")
    if cursor.fetchone()[0]:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM knowledge_chunk WHERE pg_column_toast_chunk_id(embedding) IS NOT NULL)"
        )
    else:
        cursor.execute("SELECT EXISTS (SELECT 1 FROM knowledge_chunk)")
    return bool(cursor.fetchone()[0])


def into_rows(apps, schema_editor):
    storage = settings.VECTOR_COLUMN_STORAGE
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE knowledge_chunk ALTER COLUMN embedding SET STORAGE {storage.upper()}")
        if storage in IN_ROW and _vectors_in_toast(cursor):
            cursor.execute("VACUUM FULL knowledge_chunk")


def out_of_rows(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("ALTER TABLE knowledge_chunk ALTER COLUMN embedding SET STORAGE EXTERNAL")


class Migration(migrations.Migration):
    atomic = False  # VACUUM cannot run inside a transaction

    dependencies = [("knowledge", "0022_parent_child_chunks")]

    operations = [migrations.RunPython(into_rows, out_of_rows, elidable=False)]
