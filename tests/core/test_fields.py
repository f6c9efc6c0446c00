"""Strict JSON fields and serializers that copy their declared fields shallowly."""
from concurrent.futures import ThreadPoolExecutor

import pytest
from rest_framework import serializers

from core.fields import ShallowFieldsSerializer, StrictFloatField, StrictIntegerField


def declare(base):
    """The same declared fields (a nested serializer, a list child, a dict child) on ``base``."""

    class Inner(base):
        flag = serializers.BooleanField(required=False, allow_null=True, default=None)
        count = StrictIntegerField(min_value=0, max_value=10, default=3)

    class Outer(base):
        name = serializers.CharField(max_length=5, trim_whitespace=True)
        ids = serializers.ListField(child=StrictIntegerField(min_value=1), required=False, max_length=3)
        weights = serializers.DictField(child=StrictFloatField(min_value=0, max_value=1), required=False)
        inner = Inner(required=False)

    return Outer


SHALLOW, DEEP = declare(ShallowFieldsSerializer), declare(serializers.Serializer)
BODIES = [
    {"name": " ab ", "ids": [1, 2], "weights": {"x": 0.5}, "inner": {"flag": True}},
    {"name": "abcdef", "ids": [0, "2", 3, 4], "weights": {"x": 2, "y": "1"}, "inner": {"count": 11, "flag": 3}},
    {"ids": "1", "inner": []},
    {"name": "ok"},
]


def outcome(serializer_class, body):
    serializer = serializer_class(data=body)
    return serializer.is_valid(), serializer.errors, dict(serializer.validated_data) if not serializer.errors else None


@pytest.mark.parametrize("body", BODIES)
def test_validation_is_drfs_own(body):
    assert outcome(SHALLOW, body) == outcome(DEEP, body)


def test_each_instance_binds_fields_of_its_own():
    first, second = SHALLOW(data={}), SHALLOW(data={})
    for name in ("name", "ids", "inner"):
        assert first.fields[name] is not second.fields[name] and first.fields[name].parent is first
    assert first.fields["inner"].fields["count"] is not second.fields["inner"].fields["count"]
    assert first.fields["inner"].fields["count"].parent is first.fields["inner"]


def test_instances_validate_concurrently_without_crosstalk():
    bodies = BODIES * 50
    with ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(lambda body: outcome(SHALLOW, body), bodies))
    assert outcomes == [outcome(DEEP, body) for body in bodies]
