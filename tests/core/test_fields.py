"""Strict JSON fields and serializers that copy their declared fields shallowly."""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from rest_framework import exceptions, serializers
from rest_framework.parsers import JSONParser
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from core.fields import ShallowFieldsSerializer, StrictFloatField, StrictIntegerField, validated_body


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


class Counted(SHALLOW):
    """Counts its validations (``validate`` runs once per successful field validation)."""

    validations = 0

    def validate(self, data):
        type(self).validations += 1
        return data


def request_with(body: bytes, content_type: str = "application/json") -> Request:
    return Request(APIRequestFactory().post("/x", body, content_type=content_type), parsers=[JSONParser()])


def test_a_body_seen_before_is_not_validated_again_and_each_caller_gets_its_own_copy():
    body = json.dumps({"name": "seen", "ids": [1, 2], "weights": {"x": 0.5}, "inner": {"flag": True}}).encode()
    first = validated_body(request_with(body), Counted)
    assert first == outcome(DEEP, json.loads(body))[2]
    first["ids"].append(3)
    first["inner"]["count"] = 9
    validations = Counted.validations
    second = validated_body(request_with(body), Counted)
    assert Counted.validations == validations
    assert second == outcome(DEEP, json.loads(body))[2]


def test_a_refused_body_is_refused_every_time():
    body = json.dumps({"name": "too long", "ids": [0]}).encode()
    for _ in range(2):
        with pytest.raises(serializers.ValidationError) as refused:
            validated_body(request_with(body), Counted)
        assert set(refused.value.detail) == {"name", "ids"}


def test_the_same_bytes_under_another_content_type_go_through_the_parser_again():
    body = json.dumps({"name": "typed"}).encode()
    assert validated_body(request_with(body), Counted) == {"name": "typed"}
    with pytest.raises(exceptions.UnsupportedMediaType):
        validated_body(request_with(body, "text/plain"), Counted)
