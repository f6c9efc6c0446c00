"""Fault injection for the kill tests, kept out of production.

A crash point (``pause_at``) stops the process where ``CRASH_TEST_PAUSE_AT`` says, so a test can kill
it there. It only works with ``DEBUG`` or ``FAULT_INJECTION`` on; with neither, a crash point set in
the environment stops startup (``refuse_in_production``, called as the settings load), since a paused
process would hang while it holds locks.
"""

from __future__ import annotations

import signal
import sys

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


def refuse_in_production(pause_at: str, *, debug: bool, fault_injection: bool) -> None:
    """``ImproperlyConfigured`` when a crash point is set but fault injection is not allowed."""
    if pause_at and not (debug or fault_injection):
        raise ImproperlyConfigured(
            f"CRASH_TEST_PAUSE_AT={pause_at!r} is a crash-test hook: it pauses writes inside open "
            "transactions. Unset it, or set FAULT_INJECTION=1 (tests only) or DJANGO_DEBUG=1."
        )


def pause_at(boundary: str) -> None:
    """When ``CRASH_TEST_PAUSE_AT`` names this boundary: say so on stderr and wait to be killed."""
    if boundary != settings.CRASH_TEST_PAUSE_AT:
        return
    refuse_in_production(boundary, debug=settings.DEBUG, fault_injection=settings.FAULT_INJECTION)
    sys.stderr.write(f"paused at {boundary}\n")
    sys.stderr.flush()
    while True:
        signal.pause()
