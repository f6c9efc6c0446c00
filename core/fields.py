"""Serializer fields that take JSON types as the OpenAPI schema states them, never coerced.

DRF's fields are lenient: ``CharField`` takes ``123``, ``FloatField`` takes ``true`` and ``"1.5"``,
``BooleanField`` takes ``0`` and ``"yes"``. A request the schema calls invalid must be a 400, not
quietly reinterpreted. ``ShallowFieldsSerializer``: a serializer that validates a hot endpoint's body
without rebuilding its fields per request; ``validated_body``: a body seen before is not validated again.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

from cachetools import LRUCache
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request

from core.names import NAME_MAX_LENGTH, NAME_PATTERN, name_problem


class StrictCharField(serializers.CharField):
    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictFloatField(serializers.FloatField):
    """A JSON number (an integer too); ``true`` and ``"1.5"`` are not numbers."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class ShallowFieldsSerializer(serializers.Serializer[Any]):
    """A serializer whose instances take shallow copies of the declared fields instead of DRF's deep copies.

    DRF rebuilds every declared field per instance (``copy.deepcopy`` re-runs each field's ``__init__``) so
    that one instance may alter its fields without touching others: for a search body, 60 % of the
    validation's time. A serializer that never alters its fields only needs each instance to bind its own
    copies (name, parent); what they share (children of lists and dicts, validators, choices) is read-only.
    """

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        return {name: _unbound_copy(field) for name, field in self._declared_fields.items()}


def _unbound_copy(field: serializers.Field[Any, Any, Any, Any]) -> serializers.Field[Any, Any, Any, Any]:
    copied = copy.copy(field)
    copied.__dict__.pop("fields", None)  # a nested serializer builds its own fields, bound to the copy
    return copied


# Bodies remembered per process: a search body is a few hundred bytes; larger ones are validated each time.
REMEMBERED_BODIES = 1024
REMEMBERED_BODY_BYTES = 4096
_validated: LRUCache[tuple[type, str, bytes], dict[str, Any]] = LRUCache(maxsize=REMEMBERED_BODIES)
_validated_lock = threading.Lock()


def validated_body(request: Request, serializer_class: type[serializers.Serializer[Any]]) -> dict[str, Any]:
    """``serializer_class``'s validated data for the DRF ``request``'s body, a copy the caller may change.

    A hot endpoint gets the same bodies again (every cached search answer is one), and parsing plus
    validating one costs more than the rest of such an answer's Python: the data of a body that validated
    is remembered by its bytes, its content type (which chose the parser) and the serializer, all of which
    decide it. A body that fails is validated, and refused, every time."""
    body = request.body
    key = (serializer_class, request.content_type, body) if len(body) <= REMEMBERED_BODY_BYTES else None
    if key is not None:
        with _validated_lock:
            data = _validated.get(key)
        if data is not None:
            return copy.deepcopy(data)
    params = serializer_class(data=request.data)
    params.is_valid(raise_exception=True)
    data = dict(params.validated_data)
    if key is not None:
        with _validated_lock:
            _validated[key] = copy.deepcopy(data)
    return data


@extend_schema_field({"type": "string", "maxLength": NAME_MAX_LENGTH, "pattern": NAME_PATTERN})
class NameField(StrictCharField):
    """A name under the one naming rule (``core.names``): printable Unicode, bounded, stored trimmed.
    The rule sees the name as sent (a tab before it is refused, as the schema's pattern says), then trims."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", NAME_MAX_LENGTH)
        kwargs.setdefault("trim_whitespace", False)
        kwargs.setdefault(
            "help_text", f"printable Unicode (no control or invisible characters), at most {NAME_MAX_LENGTH} characters"
        )
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        problem = name_problem(value, max_length=self.max_length or NAME_MAX_LENGTH, allow_blank=self.allow_blank)
        if problem is not None:
            raise serializers.ValidationError(problem)
        return value.strip()
