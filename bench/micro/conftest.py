"""Collects this folder's ``bench_*.py`` (the test run's ``testpaths`` is ``tests/`` and its files
``test_*.py``, so ``pytest`` alone never runs them) and stops the embedded servers a run started."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import pytest_unconfigure  # noqa: F401  (the embedded PostgreSQL and Redis, stopped)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    if file_path.suffix == ".py" and file_path.name.startswith("bench_"):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Saved runs go to ``bench/results/micro`` (ignored by git, beside the other results) unless
    ``--benchmark-storage`` says otherwise."""
    if config.getoption("benchmark_storage", None) == "file://./.benchmarks":
        config.option.benchmark_storage = f"file://{Path(__file__).resolve().parents[1] / 'results' / 'micro'}"
