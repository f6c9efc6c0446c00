"""The floors of the codebase (docs/architecture.md): an import never runs back up.

Every import statement counts, including those inside functions and ``TYPE_CHECKING`` blocks: a
deferred import is still a dependency. Tests and benchmarks may import anything.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Top to bottom; a package may import its own floor's packages (without a cycle) and lower floors.
FLOORS: list[set[str]] = [
    {"retrieval_site"},  # wiring: settings, URLs, WSGI/ASGI, the Celery app
    {"retrieval", "knowledge"},  # domain: search; knowledge bases and ingestion
    {"tenants"},  # tenants, API keys, rate tiers
    {"core"},  # HTTP platform: errors, middleware, Redis, limits, idempotency, health
    {"engines"},  # analyzer, embedders, vector / lexical indexes, rerankers: plain data in and out
]
FLOOR_OF = {package: level for level, packages in enumerate(FLOORS) for package in packages}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return {name.split(".")[0] for name in names} & FLOOR_OF.keys()


def package_imports() -> dict[str, dict[str, set[str]]]:
    """package -> imported package -> the files that import it."""
    graph: dict[str, dict[str, set[str]]] = {package: {} for package in FLOOR_OF}
    for package in FLOOR_OF:
        for path in sorted((ROOT / package).rglob("*.py")):
            for imported in imported_packages(path) - {package}:
                graph[package].setdefault(imported, set()).add(str(path.relative_to(ROOT)))
    return graph


def test_no_import_runs_up_a_floor():
    upward = [
        f"{file} ({package}, floor {FLOOR_OF[package]}) imports {imported} (floor {FLOOR_OF[imported]})"
        for package, targets in package_imports().items()
        for imported, files in targets.items()
        if FLOOR_OF[imported] < FLOOR_OF[package]
        for file in sorted(files)
    ]
    assert not upward, "imports that run back up:\n" + "\n".join(upward)


def test_no_cycle_between_packages():
    graph = {package: set(targets) for package, targets in package_imports().items()}
    cycles = []

    def visit(package: str, path: list[str]) -> None:
        for imported in sorted(graph[package]):
            if imported in path:
                cycles.append(" -> ".join(path[path.index(imported) :] + [imported]))
            else:
                visit(imported, path + [imported])

    for package in sorted(graph):
        visit(package, [package])
    assert not cycles, "package import cycles:\n" + "\n".join(sorted(set(cycles)))


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from knowledge.models import Chunk", {"knowledge"}),
        ("def f():\n    import retrieval.fusion", {"retrieval"}),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tenants.models import Tenant", {"tenants"}),
        ("from . import models\nimport numpy", set()),
    ],
)
def test_every_import_statement_counts(tmp_path, source, expected):
    module = tmp_path / "module.py"
    module.write_text(source)
    assert imported_packages(module) == expected
