"""The per-dimension HNSW indexes of ``knowledge_chunk`` index half-precision copies of the vectors
(``embedding::halfvec(dim)``): half the size and build memory for the same recall@10 (docs/BENCHMARKS.md,
"Scale to 1M chunks"). Each existing ``vector`` index is rebuilt as a ``halfvec`` one under its name,
because the search orders its graph walk by the ``halfvec`` expression; the rows keep full precision.
Rebuilding takes about as long as the original build (minutes per million chunks on 2 cores)."""
from django.db import migrations

PREFIX = "chunk_embedding_hnsw_"


def _rebuild(schema_editor, old: str, new: str) -> None:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'knowledge_chunk' AND indexname LIKE %s "
            "AND indexdef LIKE %s",
            [PREFIX + "%", f"%{old}_cosine_ops%"],
        )
        for (name,) in cursor.fetchall():
            dim = int(name.removeprefix(PREFIX))
            cursor.execute(f'DROP INDEX "{name}"')
            cursor.execute(
                f'CREATE INDEX "{name}" ON knowledge_chunk USING hnsw '
                f"((embedding::{new}({dim})) {new}_cosine_ops) WHERE embedding_dim = {dim}"
            )


def to_halfvec(apps, schema_editor):
    _rebuild(schema_editor, "vector", "halfvec")


def to_vector(apps, schema_editor):
    _rebuild(schema_editor, "halfvec", "vector")


class Migration(migrations.Migration):
    dependencies = [("knowledge", "0015_graph_entity_plural")]

    operations = [migrations.RunPython(to_halfvec, to_vector)]
