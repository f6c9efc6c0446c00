"""The retrieval engines: the store protocols (``engines.base``), their implementations (one module each)
and the registry that picks them from settings (``engines.registry``)."""

from __future__ import annotations

from engines.registry import lexical_index as get_lexical_index  # the name tests and bench scripts use

__all__ = ["get_lexical_index"]
