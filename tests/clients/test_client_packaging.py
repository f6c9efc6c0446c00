"""The Python client is a typed package (PEP 561): its wheel carries the ``py.typed`` marker, so a user's
type checker reads its annotations (mypy checks them in ``./run test``)."""

from __future__ import annotations

import tomllib

from retrieval_site.settings import BASE_DIR

CLIENT = BASE_DIR / "clients" / "python"


def test_the_client_ships_its_py_typed_marker():
    assert (CLIENT / "src" / "retrieval_client" / "py.typed").is_file()
    setuptools = tomllib.loads((CLIENT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert "py.typed" in setuptools["package-data"]["retrieval_client"]


def test_mypy_checks_the_client():
    mypy = tomllib.loads((BASE_DIR / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert "clients/python/src" in mypy["files"]
