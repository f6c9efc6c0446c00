"""Rate tiers (free and premium by default) with every tenant on free; API-key scopes."""

import django.contrib.postgres.fields
import django.db.models.deletion
from django.db import migrations, models

import tenants.models

# Frozen here: later edits of the tiers happen in the admin, not by changing this migration.
DEFAULT_TIERS = {
    "free": {"requests_per_minute": 100, "endpoint_limits": {"hybrid": 50, "graph": 20}},
    "premium": {"requests_per_minute": 1000, "endpoint_limits": {"hybrid": 50, "graph": 20}},
}


def create_default_tiers(apps, schema_editor):
    RateTier = apps.get_model("tenants", "RateTier")
    Tenant = apps.get_model("tenants", "Tenant")
    for name, limits in DEFAULT_TIERS.items():
        RateTier.objects.get_or_create(name=name, defaults=limits)
    Tenant.objects.filter(rate_tier__isnull=True).update(rate_tier=RateTier.objects.get(name="free"))


class Migration(migrations.Migration):

    dependencies = [
        ("tenants", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="RateTier",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=50, unique=True)),
                (
                    "requests_per_minute",
                    models.PositiveIntegerField(help_text="Limit for each endpoint without an override."),
                ),
                (
                    "endpoint_limits",
                    models.JSONField(
                        blank=True,
                        default=dict,
                        help_text='Per-endpoint overrides, e.g. {"hybrid": 50, "graph": 20}.',
                    ),
                ),
            ],
            options={
                "ordering": ["requests_per_minute", "name"],
            },
        ),
        migrations.AddField(
            model_name="apikey",
            name="scopes",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.CharField(
                    choices=[("search", "Search"), ("ingest", "Ingest"), ("admin", "Admin")], max_length=16
                ),
                default=tenants.models.default_scopes,
                size=None,
            ),
        ),
        # Nullable first, so that existing tenants can be put on the free tier before NOT NULL.
        migrations.AddField(
            model_name="tenant",
            name="rate_tier",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="tenants",
                to="tenants.ratetier",
            ),
        ),
        migrations.RunPython(create_default_tiers, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="tenant",
            name="rate_tier",
            field=models.ForeignKey(
                default=tenants.models.default_rate_tier,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="tenants",
                to="tenants.ratetier",
            ),
        ),
    ]
