"""Serializer fields that take JSON types as the OpenAPI schema states them, never coerced.

DRF's fields are lenient: ``CharField`` takes ``123``, ``FloatField`` takes ``true`` and ``"1.5"``,
``BooleanField`` takes ``0`` and ``"yes"``. A request the schema calls invalid must be a 400, not
quietly reinterpreted.
"""
from __future__ import annotations

from rest_framework import serializers


class StrictCharField(serializers.CharField):
    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictFloatField(serializers.FloatField):
    """A JSON number (an integer too); ``true`` and ``"1.5"`` are not numbers."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data
