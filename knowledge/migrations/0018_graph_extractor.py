from django.db import migrations, models

import knowledge.models

HELP = (
    "The entity extractor its graph was built with; another than the service's is searched with a note until "
    "manage.py rebuild_graph re-extracts it."
)


class Migration(migrations.Migration):

    dependencies = [
        ('knowledge', '0017_graph_indexes'),
    ]

    # the versions that exist were extracted by extractor 1 (jieba's POS tagger); new ones by the current one
    operations = [
        migrations.AddField(
            model_name='knowledgebaseversion',
            name='graph_extractor',
            field=models.CharField(default='1', help_text=HELP, max_length=16),
            preserve_default=False,
        ),
        migrations.AlterField(
            model_name='knowledgebaseversion',
            name='graph_extractor',
            field=models.CharField(default=knowledge.models.current_graph_extractor, help_text=HELP, max_length=16),
        ),
    ]
