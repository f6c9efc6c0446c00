"""Writes ``retrieval_site/settings/variables.py``: every field of ``Environment`` as a module-level setting
of its name, assigned from the parsed environment, so that mypy (django-stubs) knows the type of each
``settings.X`` from its field and no list of names is kept by hand.

Run ``python -m retrieval_site.settings.generate`` after adding, renaming or removing a field (a test checks
the file is current). After removing or renaming one, delete its line from ``variables.py`` first: importing
the settings reads it.
"""

from __future__ import annotations

from pathlib import Path

from retrieval_site.settings.environment import Environment

PATH = Path(__file__).with_name("variables.py")

HEADER = '''"""Every environment variable as a Django setting of its field's name and type (``retrieval_site.settings``
imports them all). Generated from ``Environment`` by ``python -m retrieval_site.settings.generate``: do not
edit; tests/retrieval_site/test_settings.py checks that it is current.
"""

from __future__ import annotations

from retrieval_site.settings.environment import read_environment

env = read_environment()

'''


def render() -> str:
    """The source of ``variables.py`` for today's fields."""
    return HEADER + "".join(f"{name} = env.{name}\n" for name in Environment.model_fields)


if __name__ == "__main__":
    PATH.write_text(render(), encoding="utf-8")
