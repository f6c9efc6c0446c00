"""Chunk.is_active was always true (ingestion wrote True, nothing cleared it) yet offered as a filter:
removed. What is searchable is decided by a KB's active version and a document's chunks existing."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('knowledge', '0003_document_chunker_version'),
    ]

    operations = [
        migrations.RemoveField(
            model_name='chunk',
            name='is_active',
        ),
    ]
