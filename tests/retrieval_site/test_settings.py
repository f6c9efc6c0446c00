"""The settings: typed environment variables in sections, one default each, documented in
docs/configuration.md, and no server started by importing them (the embedded PostgreSQL and Redis start
on first use)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from core.embedded_postgres import stop_embedded_postgres
from core.redis import stop_embedded_redis
from retrieval_site.settings import BASE_DIR, Environment, generate
from retrieval_site.settings.environment import SECTIONS, read_environment
from retrieval_site.settings.http import HttpFront
from retrieval_site.settings.observability import Observability

CONFIGURATION = BASE_DIR / "docs" / "configuration.md"

# Read by ./run (the shell) or by prometheus_client, not by the settings, and documented in these sections.
READ_OUTSIDE_SETTINGS = {
    "HOST": HttpFront, "PORT": HttpFront, "WEB_WORKERS": HttpFront, "PROMETHEUS_MULTIPROC_DIR": Observability,
}  # fmt: skip


@pytest.fixture
def environ(monkeypatch):
    """Set environment variables for ``read_environment()``; no secret key file is written."""
    monkeypatch.setenv("DJANGO_SECRET_KEY", "test")
    return monkeypatch.setenv


def test_values_are_parsed_by_type(environ, tmp_path):
    environ("DJANGO_ALLOWED_HOSTS", " a.example, b.example ,")
    environ("DJANGO_DEBUG", "yes")
    environ("SEARCH_WEIGHT_BM25", "0.5")
    environ("VAR_DIR", str(tmp_path))
    env = read_environment()
    assert env.ALLOWED_HOSTS == ["a.example", "b.example"]
    assert env.DEBUG is True
    assert env.SEARCH_WEIGHT_BM25 == 0.5
    assert tmp_path / "pgdata" == env.EMBEDDED_PG_DIR  # defaults made from another variable follow it


@pytest.mark.parametrize(
    "url",
    [
        "postgres://user:pass@db:5432/retrieval",
        "postgres://user@db/retrieval?sslmode=require&server_side_binding=false",
    ],
)
def test_a_database_url_with_client_side_binding_is_accepted(environ, url):
    environ("DATABASE_URL", url)
    assert url == read_environment().DATABASE_URL


def test_an_empty_variable_counts_as_unset(environ):
    environ("RRF_K", "")
    environ("DJANGO_ALLOWED_HOSTS", "")
    env = read_environment()
    assert Environment.model_fields["RRF_K"].default == env.RRF_K
    assert Environment.model_fields["ALLOWED_HOSTS"].default == env.ALLOWED_HOSTS


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("RRF_K", "sixty"),
        ("RRF_K", "0"),
        ("DJANGO_DEBUG", "maybe"),
        ("REDIS_TIMEOUT_S", "-1"),
        ("REDIS_URL", "http://cache:6379"),
        ("ELASTICSEARCH_URL", "localhost:9200"),
        ("DATABASE_URL", "postgress://user:hunter2@db/retrieval"),
        ("DATABASE_URL", "postgres://user:hunter2@db/retrieval?server_side_binding=true"),
        ("METRICS_ALLOWED_IPS", "127.0.0.1,10.0.0.300"),
        ("LOG_FORMAT", "xml"),
        ("OTEL_TRACES_EXPORTER", "jaeger"),
    ],
)
def test_a_bad_value_stops_startup_naming_the_variable(environ, name, value):
    environ(name, value)
    with pytest.raises(ImproperlyConfigured) as error:
        read_environment()
    message = str(error.value)
    assert f"\n  {name}: " in message
    assert message.count("\n  ") == 1  # defaults made from it are not reported as errors of their own
    assert "hunter2" not in message  # values may carry secrets


def configuration_tables() -> dict[str, list[tuple[list[str], list[str]]]]:
    """Per ``## `` heading of docs/configuration.md: (variables, stated defaults) of each row of its table."""
    tables = {}
    for block in CONFIGURATION.read_text(encoding="utf-8").split("\n## ")[1:]:
        title, body = block.split("\n", 1)
        rows = [line.split("|")[1:3] for line in body.splitlines() if line.startswith("| `")]
        tables[title.strip()] = [
            (re.findall(r"`([A-Z][A-Z0-9_]*)`", names), [default.strip() for default in defaults.split(", ")])
            for names, defaults in rows
        ]
    return tables


def test_each_section_has_a_table_of_exactly_its_variables():
    tables = configuration_tables()
    for section in SECTIONS:
        documented = {name for names, _ in tables.get(section.title, []) for name in names}
        outside = {name for name, owner in READ_OUTSIDE_SETTINGS.items() if owner is section}
        assert documented == set(section.own_variables()) | outside, section.title
    assert {title for title, rows in tables.items() if rows} == {section.title for section in SECTIONS}
    assert [name for section in SECTIONS for name in section.own_variables()] == Environment.variables()


def test_the_typed_settings_module_is_generated_from_todays_fields():
    """``variables.py`` gives each field's type to ``settings.X`` (mypy); it must list exactly the fields."""
    assert generate.PATH.read_text(encoding="utf-8") == generate.render(), (
        "run `python -m retrieval_site.settings.generate`"
    )


def stated_wrongly(stated: str, default: object) -> bool:
    """Whether a default as docs/configuration.md states it contradicts the code's."""
    literal = stated.strip("`")
    if isinstance(default, bool):
        return literal != str(default).lower()
    if isinstance(default, (int, float)):
        return not re.fullmatch(r"[0-9.]+", literal) or float(literal) != default
    if default in ("", [], None):  # described in words ("unset", "empty: ..."), never as a value
        return bool(re.fullmatch(r"`[^`]*`|[0-9.]+|true|false", stated))
    value = ",".join(default) if isinstance(default, list) else str(default)
    return literal != value


def test_configuration_states_the_codes_defaults():
    fields = {field.validation_alias or name: field for name, field in Environment.model_fields.items()}
    checked, wrong, unreadable = 0, [], []
    for rows in configuration_tables().values():
        for names, defaults in rows:
            if not any(name in fields for name in names):
                continue  # read outside the settings
            if len(defaults) not in (1, len(names)):
                unreadable.append(names)
                continue
            for name, stated in zip(names, defaults * len(names) if len(defaults) == 1 else defaults):
                if fields[name].default_factory is None and not isinstance(fields[name].default, Path):
                    checked += 1
                    if stated_wrongly(stated, fields[name].default):
                        wrong.append((name, stated, fields[name].default))
    assert wrong == [] and unreadable == []
    assert checked > 80  # the tables' shape still lets this test read them


def test_code_reads_settings_without_repeating_defaults():
    """``getattr(settings, "X", default)`` would be a second default, out of sight of the first."""
    pattern = re.compile(r"getattr\(\s*settings\s*,\s*[\"'][A-Z0-9_]+[\"']\s*,")
    offenders = [
        str(path.relative_to(BASE_DIR))
        for package in ("retrieval_site", "retrieval", "knowledge", "tenants", "core", "engines", "bench")
        for path in (BASE_DIR / package).rglob("*.py")
        if pattern.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def run(args: list[str], env: dict[str, str]) -> None:
    result = subprocess.run(args, cwd=BASE_DIR, env=env, timeout=180, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def run_django(code: str, env: dict[str, str]) -> None:
    run([sys.executable, "-c", f"import django; django.setup()\n{code}"], env)


@pytest.fixture
def fresh_var_dir():
    """A VAR_DIR of its own inside the project (embedded PostgreSQL refuses data dirs it cannot reach
    as its system user), with both embedded servers stopped and the folder removed afterwards."""
    (BASE_DIR / "var").mkdir(exist_ok=True)
    var_dir = Path(tempfile.mkdtemp(prefix="test-settings-", dir=BASE_DIR / "var"))
    yield var_dir
    stop_embedded_redis(var_dir / "redis")
    stop_embedded_postgres(var_dir / "pgdata")
    shutil.rmtree(var_dir, ignore_errors=True)


@pytest.mark.slow
def test_importing_settings_starts_no_server_and_first_use_does(fresh_var_dir):
    env = {key: value for key, value in os.environ.items() if not key.startswith(("EMBEDDED_", "LEXICAL_"))}
    env.update(DJANGO_SETTINGS_MODULE="retrieval_site.settings", VAR_DIR=str(fresh_var_dir))
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    postmaster, socket = fresh_var_dir / "pgdata" / "postmaster.pid", fresh_var_dir / "redis" / "redis.sock"

    run_django("import retrieval_site.wsgi", env)  # settings, every app, the WSGI handler
    assert not postmaster.exists() and not socket.exists()

    run_django(
        "from django.core.cache import cache\n"
        "from django.db import connection\n"
        "connection.cursor().execute('SELECT 1')\n"
        "cache.set('probe', 1)\n"
        "assert cache.get('probe') == 1",
        env,
    )
    assert postmaster.exists() and socket.exists()

    run([sys.executable, "manage.py", "embedded_services", "stop"], env)
    assert not postmaster.exists() and not socket.exists()
