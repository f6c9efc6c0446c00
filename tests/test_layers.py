"""The floors of the codebase (docs/architecture.md): an import never runs back up, and the modules
of a package never import one another in a circle.

Every import statement counts, including those inside functions and ``TYPE_CHECKING`` blocks: a
deferred import is still a dependency. Tests and benchmarks may import anything.

And no test asserts a duration: on a shared, loaded machine a bound on the wall clock fails at random
and proves nothing a recorded event would not (``tests.concurrency``, ``tests.peers``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Top to bottom; a package may import its own floor's packages (without a cycle) and lower floors.
FLOORS: list[set[str]] = [
    {"retrieval_site"},  # wiring: settings, URLs, WSGI/ASGI, the Celery app
    {"retrieval", "graph", "knowledge"},  # domain: search; the knowledge graph; knowledge bases and ingestion
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


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, root: Path, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that a file imports: ``from a.b import c`` names ``a.b.c`` when that is
    a module, else ``a.b``; relative imports are resolved. A parent package imported on the way (its
    ``__init__``) is not counted: only the names an import statement gives."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = module_name(path, root).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1] + [node.module or ""]).strip(".")
            base = node.module if node.level == 0 else base
            names.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names)
    return (names & modules) - {module_name(path, root)}


def module_cycles(package: str, root: Path = ROOT) -> list[str]:
    """Import cycles between the modules of ``package`` (``a -> b -> a``): empty when there is none."""
    paths = {module_name(path, root): path for path in sorted((root / package).rglob("*.py"))}
    graph = {module: imported_modules(path, root, set(paths)) for module, path in paths.items()}
    cycles = set()

    def visit(module: str, path: list[str]) -> None:
        for imported in sorted(graph[module]):
            if imported in path:
                cycle = path[path.index(imported) :]
                start = cycle.index(min(cycle))  # one spelling per cycle, whichever module it was found from
                cycles.add(" -> ".join(cycle[start:] + cycle[:start] + [min(cycle)]))
            elif imported not in done:
                visit(imported, path + [imported])
        done.add(module)

    done: set[str] = set()
    for module in sorted(graph):
        if module not in done:
            visit(module, [module])
    return sorted(cycles)


@pytest.mark.parametrize("package", sorted(FLOOR_OF))
def test_no_import_cycle_inside_a_package(package):
    cycles = module_cycles(package)
    assert not cycles, f"module import cycles in {package}:\n" + "\n".join(cycles)


def test_a_deferred_import_back_makes_a_cycle(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text("def f():\n    from ..a import x\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n")
    assert module_cycles("pkg", tmp_path) == ["pkg.a -> pkg.sub.b -> pkg.a"]
    (package / "sub" / "b.py").write_text("x = 1\n")
    (package / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import c\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import d\n")
    assert module_cycles("pkg", tmp_path) == ["pkg.c -> pkg.d -> pkg.c"]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from knowledge.models import Chunk", {"knowledge"}),
        ("def f():\n    import retrieval.fusion_functions", {"retrieval"}),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tenants.models import Tenant", {"tenants"}),
        ("from . import models\nimport numpy", set()),
    ],
)
def test_every_import_statement_counts(tmp_path, source, expected):
    module = tmp_path / "module.py"
    module.write_text(source)
    assert imported_packages(module) == expected


# --- no test asserts a duration ---------------------------------------------------------------------

CLOCKS = {"time", "perf_counter", "monotonic", "time_ns", "perf_counter_ns", "monotonic_ns"}


def _reads_the_clock(node: ast.AST, clock_names: set[str]) -> bool:
    """``time.<clock>()``, a clock imported by name (``from time import monotonic``), or a name
    assigned from either (``started = time.perf_counter()``, ``elapsed = time.time() - started``)."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Call):
            func = inner.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                if func.value.id == "time" and func.attr in CLOCKS:
                    return True
            elif isinstance(func, ast.Name) and func.id in clock_names:
                return True
        elif isinstance(inner, ast.Name) and inner.id in clock_names and isinstance(inner.ctx, ast.Load):
            return True
    return False


def _assigned(target: ast.AST, value: ast.AST) -> list[tuple[str, ast.AST]]:
    """(name, the expression it gets) of an assignment; ``a, b = x, y`` pairs them up."""
    if isinstance(target, ast.Name):
        return [(target.id, value)]
    if isinstance(target, (ast.Tuple, ast.List)):
        if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
            return [pair for inner, part in zip(target.elts, value.elts) for pair in _assigned(inner, part)]
        return [(name.id, value) for name in ast.walk(target) if isinstance(name, ast.Name)]
    return []


def timed_assertions(path: Path) -> list[int]:
    """Lines of ``assert`` statements that compare something read from the wall clock."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "time"
        for alias in node.names
        if alias.name in CLOCKS
    }
    clock_calls = set(imported)
    timed: set[str] = set()  # names holding a clock reading or a difference of them
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and node.value is not None:
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for name, value in _assigned(target, node.value):
                    if _reads_the_clock(value, clock_calls | timed):
                        timed.add(name)
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Assert)
        and any(
            isinstance(compare, ast.Compare)
            and any(_reads_the_clock(side, clock_calls | timed) for side in [compare.left, *compare.comparators])
            for compare in ast.walk(node.test)
        )
    )


def test_no_test_asserts_a_duration():
    timed = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for line in timed_assertions(path)
    ]
    assert not timed, "assertions on the wall clock (assert what the timing stood for instead):\n" + "\n".join(timed)


@pytest.mark.parametrize(
    ("source", "lines"),
    [
        ("import time\nstarted = time.perf_counter()\nassert time.perf_counter() - started < 1", [3]),
        ("import time\nassert time.time() > 0", [2]),
        ("import time\ndeadline = time.monotonic() + 5\nassert time.monotonic() < deadline, 'late'", [3]),
        ("import time\nstarted = time.monotonic()\nelapsed = time.monotonic() - started\nassert elapsed < 2", [4]),
        ("from time import perf_counter as now\nt = now()\nassert now() - t <= 0.5", [3]),
        ("import time\nassert ok and (time.monotonic() - t0) < 3", [2]),
        ("import time\nstarted = time.monotonic()\nassert result == 42", []),
        ("import time\nanswers, deadline = [], time.monotonic() + 9\nassert answers == []", []),
        ("assert clock.perf_counter() == 100.0\nassert timings.milliseconds['vector'] == 10", []),
    ],
)
def test_a_wall_clock_comparison_in_an_assertion_is_found(tmp_path, source, lines):
    module = tmp_path / "test_module.py"
    module.write_text(source)
    assert timed_assertions(module) == lines
