"""The failure rule's one shape: what an optional stage that raised becomes (a ``degraded`` entry)."""

from __future__ import annotations

import logging

from retrieval.types import Degradation

logger = logging.getLogger("retrieval.services.search")  # the pipeline's logger, as log filters know it


def degradation_of(stage: str, exc: Exception) -> Degradation:
    """A typed engine error keeps its own ``cause`` and message; anything else is ``internal_error``,
    its details (traceback included) in the log, not in the response."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, str) and cause:
        return degradation(stage, cause, getattr(exc, "message", None) or str(exc))
    message = f"unexpected {type(exc).__name__}; details are in the service log"
    return degradation(stage, "internal_error", message, exc)


def degradation(stage: str, cause: str, message: str, exc: Exception | None = None) -> Degradation:
    """The degradation and its one warning (the request id comes from the logging filter)."""
    logger.warning("search degraded", extra={"stage": stage, "cause": cause, "detail": message}, exc_info=exc)
    return Degradation(stage, cause, message)
