"""The chunk table's GIN indexes (business fields in ``metadata``, ``tags``) lose their pending list
(``fastupdate = off``): new rows go straight into the index instead of a list that every filtered
search reads whole until the next vacuum merges it. That list held up to 4 MB after a bulk ingestion
and added 10-15 ms to a filtered search that otherwise took 2-6 ms (docs/benchmarks/decisions.md, "GIN
pending lists"). What the list holds now is merged first (``gin_clean_pending_list``); no index is
rebuilt. Django's state gets the same indexes with ``fastupdate=False``."""

import django.contrib.postgres.indexes
from django.db import migrations

INDEXES = ("chunk_metadata_gin", "chunk_tags_gin")


def _indexes_without_pending_list() -> list:
    return [
        migrations.RemoveIndex(model_name="chunk", name="chunk_metadata_gin"),
        migrations.RemoveIndex(model_name="chunk", name="chunk_tags_gin"),
        migrations.AddIndex(
            model_name="chunk",
            index=django.contrib.postgres.indexes.GinIndex(
                fields=["metadata"], name="chunk_metadata_gin", opclasses=["jsonb_path_ops"], fastupdate=False
            ),
        ),
        migrations.AddIndex(
            model_name="chunk",
            index=django.contrib.postgres.indexes.GinIndex(fields=["tags"], name="chunk_tags_gin", fastupdate=False),
        ),
    ]


class Migration(migrations.Migration):
    dependencies = [("knowledge", "0023_vector_storage_in_row")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=[f"ALTER INDEX {name} SET (fastupdate = off)" for name in INDEXES]
                    + [f"SELECT gin_clean_pending_list('{name}'::regclass)" for name in INDEXES],
                    reverse_sql=[f"ALTER INDEX {name} RESET (fastupdate)" for name in INDEXES],
                )
            ],
            state_operations=_indexes_without_pending_list(),
        )
    ]
