"""The project under measure: Django set up as ``manage.py`` does, from this checkout or another one.

This is the one place the bench touches ``sys.path``: to import the *project's* code from another
checkout (``--code DIR``, a before/after on the same data) or third-party packages installed into a
folder of their own (``--peers-path``). Bench modules import each other as the ``bench`` package."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def setup_django(code: Path | None = None) -> Path:
    """Configure Django like manage.py does; SIGTERM becomes SystemExit so ``finally`` blocks clean up.
    ``code``: import the project from that checkout instead (e.g. an older commit's, for before/after).
    Returns the checkout whose code is imported."""
    root = REPO_ROOT if code is None else code.resolve()
    if code is not None:
        sys.path.insert(0, str(root))
    os.chdir(root)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "retrieval_site.settings")
    os.environ.setdefault("LC_ALL", "C.UTF-8")
    os.environ.setdefault("LANG", "C.UTF-8")
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    import django

    django.setup()
    return root


def add_packages(folder: Path) -> None:
    """Packages ``pip install --target folder`` put there, after the virtualenv's own."""
    sys.path.append(str(folder.resolve()))
