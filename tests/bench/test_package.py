"""``bench/`` is one package: every module imports as ``bench.<name>`` (a benchmark's module level imports
no project code before Django is set up, so each also answers ``--help`` cheaply), no module imports
another in a circle, and none reaches a sibling through ``sys.path``."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys

import pytest

from tests.test_layers import ROOT, module_cycles, module_name

BENCH = ROOT / "bench"
MODULES = sorted(module_name(path, ROOT) for path in BENCH.rglob("*.py") if "micro" not in path.parts)
# Run as ``python -m bench.<name>``: the packages through their __main__, the rest as modules.
BENCHMARKS = sorted(
    name.removesuffix(".__main__")
    for path in BENCH.rglob("*.py")
    if "harness" not in path.parts
    and "micro" not in path.parts
    and path.name != "__init__.py"
    and "__main__" in path.read_text(encoding="utf-8")
    for name in [module_name(path, ROOT)]
)


@pytest.mark.parametrize("name", MODULES)
def test_every_bench_module_imports_as_part_of_the_package(name):
    importlib.import_module(name)


def test_no_import_cycle_inside_bench():
    assert module_cycles("bench") == []


def test_only_the_harness_touches_sys_path():
    """``bench.harness.project`` imports the project from another checkout; nothing else edits the path."""
    touching = []
    for path in BENCH.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", "") == "sys":
                touching.append(str(path.relative_to(ROOT)))
    assert sorted(set(touching)) == ["bench/harness/project.py"]


def test_the_benchmarks_are_found():
    """What the help test below runs: every benchmark the docs name (a guard against an empty list)."""
    assert {"bench.ingest", "bench.scale", "bench.filtered_scale", "bench.graph.multihop", "bench.load"} <= set(
        BENCHMARKS
    )


@pytest.mark.parametrize("name", BENCHMARKS)
def test_each_benchmark_answers_help_without_running(name):
    done = subprocess.run(
        [sys.executable, "-m", name, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout


def test_the_micro_benchmarks_are_never_test_files():
    """``bench/micro`` holds benchmarks, never timed tests: no file a test run would collect by its name."""
    names = [path.name for path in (BENCH / "micro").glob("*.py") if path.name not in ("__init__.py", "conftest.py")]
    assert names and all(name.startswith("bench_") for name in names)
