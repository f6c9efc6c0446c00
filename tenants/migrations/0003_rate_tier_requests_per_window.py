"""Rate tiers say what they count: ``requests_per_minute`` counted per ``RATE_LIMIT_WINDOW_S`` window, so it
becomes ``requests_per_window``; and a tier limits only endpoints that exist, so the ``graph`` limits
migration 0002 gave the default tiers (no graph mode exists yet) are removed."""

from django.db import migrations, models

NONEXISTENT_ENDPOINTS = ("graph",)


def drop_limits_of_nonexistent_endpoints(apps, schema_editor):
    RateTier = apps.get_model("tenants", "RateTier")
    for tier in RateTier.objects.all():
        limits = {name: limit for name, limit in tier.endpoint_limits.items() if name not in NONEXISTENT_ENDPOINTS}
        if limits != tier.endpoint_limits:
            tier.endpoint_limits = limits
            tier.save(update_fields=["endpoint_limits"])


class Migration(migrations.Migration):

    dependencies = [
        ("tenants", "0002_rate_tiers_and_scopes"),
    ]

    operations = [
        migrations.RenameField(model_name="ratetier", old_name="requests_per_minute", new_name="requests_per_window"),
        migrations.AlterField(
            model_name="ratetier",
            name="requests_per_window",
            field=models.PositiveIntegerField(
                help_text="Limit per window (RATE_LIMIT_WINDOW_S, 60 s by default) of each endpoint without an "
                "override."
            ),
        ),
        migrations.AlterField(
            model_name="ratetier",
            name="endpoint_limits",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text='Per-endpoint overrides of the limit per window, e.g. {"hybrid": 50}; '
                "endpoints: vector, bm25, hybrid.",
            ),
        ),
        migrations.AlterModelOptions(name="ratetier", options={"ordering": ["requests_per_window", "name"]}),
        migrations.RunPython(drop_limits_of_nonexistent_endpoints, migrations.RunPython.noop),
    ]
