"""Versions get their own chunking, languages and timings (a new version may use another model or
chunk size than the active one), and the statuses ready / failed; existing versions take their
knowledge base's settings."""
import django.contrib.postgres.fields
from django.db import migrations, models


def copy_settings_from_knowledge_bases(apps, schema_editor):
    KnowledgeBase = apps.get_model("knowledge", "KnowledgeBase")
    KnowledgeBaseVersion = apps.get_model("knowledge", "KnowledgeBaseVersion")
    for kb in KnowledgeBase.objects.all():
        KnowledgeBaseVersion.objects.filter(knowledge_base=kb).update(
            chunk_size=kb.chunk_size, chunk_overlap=kb.chunk_overlap, languages=kb.languages
        )


class Migration(migrations.Migration):
    dependencies = [("knowledge", "0006_originals_and_tasks")]

    operations = [
        migrations.AddField(
            model_name="knowledgebaseversion",
            name="chunk_size",
            field=models.PositiveIntegerField(
                default=0, help_text="Chunk length in tokens of the embedding model's tokenizer."
            ),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="knowledgebaseversion",
            name="chunk_overlap",
            field=models.PositiveIntegerField(default=0),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="knowledgebaseversion",
            name="languages",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.CharField(max_length=8), blank=True, default=list, size=None
            ),
        ),
        migrations.AddField(
            model_name="knowledgebaseversion",
            name="error",
            field=models.TextField(blank=True, help_text="Why the build failed."),
        ),
        migrations.AddField(
            model_name="knowledgebaseversion",
            name="finished_at",
            field=models.DateTimeField(blank=True, help_text="When its build ended.", null=True),
        ),
        migrations.AddField(
            model_name="knowledgebaseversion",
            name="activated_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="knowledgebaseversion",
            name="retired_at",
            field=models.DateTimeField(
                blank=True,
                help_text="When another version replaced it; purged KB_VERSION_RETENTION_DAYS later.",
                null=True,
            ),
        ),
        migrations.RunPython(copy_settings_from_knowledge_bases, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="knowledgebaseversion",
            name="status",
            field=models.CharField(
                choices=[
                    ("building", "Building"), ("ready", "Ready"), ("active", "Active"), ("retired", "Retired"),
                    ("failed", "Failed"),
                ],
                default="building",
                max_length=16,
            ),  # fmt: skip
        ),
        migrations.AlterField(
            model_name="knowledgetask",
            name="kind",
            field=models.CharField(
                choices=[("ingest", "Ingest"), ("build_version", "Build Version")], max_length=16
            ),
        ),
    ]
