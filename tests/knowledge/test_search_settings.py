"""A knowledge base's search settings: what is stored, what is refused, how layers merge."""

import pytest
from django.core.exceptions import ValidationError

from knowledge.search_settings import clean_search_settings, merged_search_settings


def test_valid_settings_are_stored_typed_in_a_fixed_order():
    cleaned = clean_search_settings(
        {"group_by": "document", "rrf_k": 20.0, "weights": {"bm25": 1, "vector": 0.5}, "dense_weight_floor": 0}
    )
    assert cleaned == {
        "weights": {"bm25": 1.0, "vector": 0.5},
        "rrf_k": 20,
        "dense_weight_floor": 0.0,
        "group_by": "document",
    }
    assert list(cleaned) == ["weights", "rrf_k", "dense_weight_floor", "group_by"]
    assert type(cleaned["rrf_k"]) is int and type(cleaned["weights"]["bm25"]) is float
    assert clean_search_settings(None) == clean_search_settings("") == {}
    assert clean_search_settings({"semantic_cache": True}) == {"semantic_cache": True}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1, 2], "must be a JSON object"),
        ({"rrf": 20}, "unknown key 'rrf'"),
        ({"weights": {"dense": 1}}, "unknown retriever 'dense'"),
        ({"weights": [1]}, "weights must be an object"),
        ({"weights": {"vector": -1}}, "weights.vector must be a number from 0 to 100"),
        ({"rrf_k": 0}, "rrf_k must be an integer from 1 to 1000"),
        ({"rrf_k": 2.5}, "rrf_k must be an integer"),
        ({"candidates": True}, "candidates must be an integer"),
        ({"candidates": 201}, "candidates must be an integer from 1 to 200"),
        ({"dense_weight_floor": float("nan")}, "dense_weight_floor must be a number"),
        ({"aggregate": "mean"}, "aggregate must be one of none, max, sum"),
        ({"group_by": "kb"}, "group_by must be one of chunk, document"),
        ({"fusion": "borda"}, "fusion must be one of rrf, relevance, minmax"),
        ({"leg_weights": "learned"}, "leg_weights must be one of evidence, fixed"),
        ({"leg_candidates": "all"}, "leg_candidates must be one of union, own"),
        ({"semantic_cache": 1}, "semantic_cache must be true or false"),
        ({"semantic_cache": "yes"}, "semantic_cache must be true or false"),
    ],
)
def test_bad_settings_are_refused_naming_the_key(value, message):
    with pytest.raises(ValidationError) as raised:
        clean_search_settings(value)
    assert any(message in text for text in raised.value.messages), raised.value.messages


def test_every_bad_key_is_named_at_once():
    with pytest.raises(ValidationError) as raised:
        clean_search_settings({"rrf_k": 0, "candidates": 0, "weights": {"bm25": 101}})
    assert len(raised.value.messages) == 3


def test_later_layers_win_key_by_key_and_weights_retriever_by_retriever():
    kb = {"weights": {"vector": 0.5, "bm25": 2.0}, "rrf_k": 20, "candidates": 50}
    version = {"weights": {"vector": 0.3}, "rrf_k": 10}
    merged = merged_search_settings(kb, version)
    assert merged == {"weights": {"vector": 0.3, "bm25": 2.0}, "rrf_k": 10, "candidates": 50}
    assert merged_search_settings({}, None, kb) == kb
