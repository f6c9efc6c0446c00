import django.contrib.postgres.indexes
from django.contrib.postgres.operations import BtreeGinExtension
from django.db import migrations


class Migration(migrations.Migration):
    # The (tenant, acl) index first, then the acl-only one goes: the ACL check stays indexed throughout.

    dependencies = [
        ("knowledge", "0028_document_acl"),
    ]

    operations = [
        BtreeGinExtension(),
        migrations.AddIndex(
            model_name="chunk",
            index=django.contrib.postgres.indexes.GinIndex(
                fastupdate=False, fields=["tenant", "acl"], name="chunk_tenant_acl_gin"
            ),
        ),
        migrations.RemoveIndex(
            model_name="chunk",
            name="chunk_acl_gin",
        ),
    ]
