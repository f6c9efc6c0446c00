"""Fault injection (core.faults) cannot run under production settings."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from core.faults import pause_at

BASE_DIR = Path(settings.BASE_DIR)


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key not in ("FAULT_INJECTION", "DJANGO_DEBUG")}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=BASE_DIR,
        env={**environment, "DJANGO_SETTINGS_MODULE": "retrieval_site.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_crash_point_set_under_production_settings_stops_startup():
    refused = manage("check", "--deploy", CRASH_TEST_PAUSE_AT="rows_written")
    assert refused.returncode != 0
    assert "ImproperlyConfigured" in refused.stderr
    assert "CRASH_TEST_PAUSE_AT='rows_written' is a crash-test hook" in refused.stderr


def test_a_crash_point_starts_with_fault_injection_on():
    allowed = manage("check", CRASH_TEST_PAUSE_AT="rows_written", FAULT_INJECTION="1")
    assert allowed.returncode == 0, allowed.stderr


def test_a_crash_point_set_at_run_time_refuses_to_pause_without_fault_injection(settings):
    settings.CRASH_TEST_PAUSE_AT, settings.DEBUG, settings.FAULT_INJECTION = "rows_written", False, False
    pause_at("rows_committed")  # another boundary: passes
    with pytest.raises(ImproperlyConfigured, match="crash-test hook"):
        pause_at("rows_written")
