"""Carry what was stored on the raw ``relevance`` scale over to the calibrated one
(``retrieval.relevance_calibration``): the KBs' and versions' default ``score_threshold``, the
search log's best relevance (what the analytics' low-relevance list compares) and the thresholds of
the evaluation runs' summaries (their recommended threshold can become a KB's default). The mapping is monotone,
so a migrated threshold keeps exactly the hits it kept before. Its constants are written here, not
imported, so that this migration means the same after a later re-fit."""

import math

from django.db import migrations

SLOPE = 10.3949
INTERCEPT = -4.9985


def _calibrated(raw: float) -> float:
    return 0.0 if raw <= 0.0 else round(1.0 / (1.0 + math.exp(-(SLOPE * raw + INTERCEPT))), 6)


def _raw(calibrated: float) -> float:
    if calibrated <= 0.0:
        return 0.0
    calibrated = min(calibrated, 1.0 - 1e-9)
    return round((math.log(calibrated / (1.0 - calibrated)) - INTERCEPT) / SLOPE, 6)


def _convert(apps, schema_editor, convert, log_sql, params):
    for model in (apps.get_model("knowledge", "KnowledgeBase"), apps.get_model("knowledge", "KnowledgeBaseVersion")):
        for row in model.objects.filter(search_settings__has_key="score_threshold").only("pk", "search_settings"):
            value = row.search_settings.get("score_threshold")
            if isinstance(value, int | float):
                row.search_settings["score_threshold"] = min(1.0, max(0.0, convert(float(value))))
                row.save(update_fields=["search_settings"])
    for run in apps.get_model("retrieval", "EvaluationRun").objects.exclude(summary={}).only("pk", "summary"):
        if _convert_summary(run.summary, convert):
            run.save(update_fields=["summary"])
    SearchLog = apps.get_model("retrieval", "SearchLog")
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(log_sql.format(table=schema_editor.quote_name(SearchLog._meta.db_table)), params)


def _convert_summary(summary, convert):
    """The thresholds of a run's summary (``RunResult.summary`` and its ``kb_threshold``); the shares
    they keep do not change. True when it held any."""
    curve = summary.get("relevance_threshold")
    kb_threshold = summary.get("kb_threshold")
    if not isinstance(curve, dict) and not isinstance(kb_threshold, dict):
        return False
    if isinstance(curve, dict):
        if isinstance(curve.get("threshold_keeping_90"), int | float):  # floored: it keeps what it says
            curve["threshold_keeping_90"] = math.floor(convert(curve["threshold_keeping_90"]) * 1e4) / 1e4
        if isinstance(curve.get("threshold_dropping_half_of_others"), int | float):
            curve["threshold_dropping_half_of_others"] = round(convert(curve["threshold_dropping_half_of_others"]), 4)
        for point in curve.get("curve") or []:
            point["threshold"] = round(convert(point["threshold"]), 4)
    if isinstance(kb_threshold, dict) and isinstance(kb_threshold.get("threshold"), int | float):
        kb_threshold["threshold"] = round(convert(kb_threshold["threshold"]), 6)
    return True


def forward(apps, schema_editor):
    _convert(
        apps,
        schema_editor,
        _calibrated,
        "UPDATE {table} SET best_relevance = CASE WHEN best_relevance <= 0 THEN 0 "
        "ELSE round((1 / (1 + exp(-(%s * best_relevance + %s))))::numeric, 6) END WHERE best_relevance IS NOT NULL",
        [SLOPE, INTERCEPT],
    )


def backward(apps, schema_editor):
    _convert(
        apps,
        schema_editor,
        _raw,
        "UPDATE {table} SET best_relevance = CASE WHEN best_relevance <= 0 THEN 0 "
        "ELSE round(GREATEST(0, (ln(LEAST(best_relevance, 0.999999999) / (1 - LEAST(best_relevance, 0.999999999))) - %s)"
        " / %s)::numeric, 6) END WHERE best_relevance IS NOT NULL",
        [INTERCEPT, SLOPE],
    )


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0028_document_acl"),
        ("retrieval", "0004_query_sets_evaluation_runs_version_gates"),
    ]

    operations = [migrations.RunPython(forward, backward)]
