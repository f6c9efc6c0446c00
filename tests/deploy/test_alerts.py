"""deploy/prometheus: the alert rules pass ``promtool check`` and their unit tests (each alert fires in one
case and stays quiet in another), and every metric they read is one the service really exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from knowledge.errors import InvalidSourcePath
from knowledge.models import SourceRun
from knowledge.sources import create_source, sync
from tests.conftest import client_for, scraped_metrics

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
RULES, RULE_TESTS, CONFIG = PROMETHEUS / "alerts.yml", PROMETHEUS / "alerts.test.yml", PROMETHEUS / "prometheus.yml"
# Series Prometheus writes itself for each scrape, not the service.
SCRAPE_SERIES = {"up"}
PROMQL_WORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}

needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool is not installed (Debian's `prometheus` package: ./run test installs it when run as root)",
)


def alerts() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120, cwd=PROMETHEUS)


@needs_promtool
def test_the_rules_and_the_prometheus_config_pass_promtool_check():
    rules = promtool("check", "rules", RULES.name)
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in rules.stdout
    config = promtool("check", "config", CONFIG.name)
    assert config.returncode == 0, config.stdout + config.stderr


@needs_promtool
def test_the_unit_tests_of_the_rules_pass():
    result = promtool("test", "rules", RULE_TESTS.name)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_case_that_fires_and_one_that_does_not():
    cases = [case for test in yaml.safe_load(RULE_TESTS.read_text())["tests"] for case in test["alert_rule_test"]]
    names = {rule["alert"] for rule in alerts()}
    assert {case["alertname"] for case in cases if case["exp_alerts"]} == names
    assert {case["alertname"] for case in cases if not case["exp_alerts"]} == names


def test_every_alert_is_documented_with_its_runbook_anchor():
    documented = (ROOT / "docs" / "alerts.md").read_text()
    for rule in alerts():
        assert f"### {rule['alert']}" in documented, rule["alert"]
        assert rule["annotations"]["runbook"] == f"docs/alerts.md#{rule['alert'].lower()}"


def selectors(expr: str) -> dict[str, set[str]]:
    """The metrics an expression reads, each with the label names its matchers use."""
    found: dict[str, set[str]] = {}
    expr = re.sub(r"\[[^\]]*\]", " ", expr)  # range durations
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    for match in re.finditer(r"\b([a-zA-Z_:][\w:]*)\b\s*(\{[^}]*\})?(?!\s*\()", expr):
        name, matchers = match.group(1), match.group(2) or ""
        if name.lower() not in PROMQL_WORDS:
            found.setdefault(name, set()).update(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers))
    return found


def test_selectors_finds_metrics_and_matcher_labels():
    expr = 'histogram_quantile(0.95, sum by (endpoint, le) (rate(a_bucket{endpoint=~"x|y", le!="1"}[5m]))) > 3 * b'
    assert selectors(expr) == {"a_bucket": {"endpoint", "le"}, "b": set()}


@pytest.mark.django_db
def test_every_metric_the_rules_read_is_exported_with_the_labels_they_match(
    client, sample_kb, rerank_server, settings, tmp_path
):
    """After a search the reranker fails (a degraded stage, the reranker's breaker) and a source sync that
    fails, the real /metrics holds a sample of every series the rules select."""
    rerank_server.mode = "500"
    response = client_for(sample_kb.tenant).post(
        "/api/v1/retrieval/hybrid", {"query": "battery storage", "rerank": True}, format="json"
    )
    assert response.status_code == 200 and response.json()["degraded"][0]["stage"] == "rerank"
    settings.KNOWLEDGE_SOURCE_ROOTS = [str(tmp_path)]
    (tmp_path / "handbook").mkdir()
    source = create_source(sample_kb, kind="folder", path="handbook", interval_seconds=3600)
    (tmp_path / "handbook").rmdir()
    with pytest.raises(InvalidSourcePath):
        sync(source, trigger=SourceRun.Trigger.MANUAL, start_progress=lambda total: lambda done: None)

    exported = scraped_metrics(client)
    read = {}
    for rule in alerts():
        for name, labels in selectors(rule["expr"]).items():
            read.setdefault(name, set()).update(labels)
    assert read.keys() - SCRAPE_SERIES, "no metric found in the rules"
    for name, labels in read.items():
        if name in SCRAPE_SERIES:
            continue
        assert exported.get(name), f"the rules read {name}, which /metrics does not export"
        exported_labels = set().union(*(dict(label_set) for label_set in exported[name]))
        assert labels <= exported_labels, f"{name} has no label {labels - exported_labels}"
