"""``bench.hybrid_ab`` names the code each tree holds, also a tree that is not a git checkout."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.hybrid_ab import __main__ as hybrid_ab

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_a_git_checkout_is_named_by_its_commit():
    head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    assert hybrid_ab.tree_version(REPO_ROOT) == head.stdout.strip()


def test_an_exported_tree_is_named_by_its_sources_quietly(tmp_path, capfd):
    """A ``git archive`` export has no .git: no "fatal: not a git repository", and a digest that follows the code."""
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "errors.py").write_text("CODE = 1\n")
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "data.py").write_text("not the tree's code\n")
    before = hybrid_ab.tree_version(tmp_path)
    (tmp_path / "var" / "data.py").write_text("changed data\n")
    assert hybrid_ab.tree_version(tmp_path) == before
    (tmp_path / "core" / "errors.py").write_text("CODE = 2\n")
    after = hybrid_ab.tree_version(tmp_path)
    assert before.startswith("no git: Python sources sha256 ") and after != before
    assert capfd.readouterr().err == ""
