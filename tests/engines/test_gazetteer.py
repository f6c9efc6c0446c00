"""The gazetteer behind the extractor's places: JioNLP's data read without importing jionlp. The names
checked are written by hand."""

from __future__ import annotations

import pytest

from engines.gazetteer import is_place, place_names


@pytest.mark.parametrize(
    "name",
    [
        "四川",  # a province by its short name
        "成都市",  # a city in full
        "成都",  # ... and by its short name
        "武侯区",  # a district
        "南翔镇",  # a town in full
        "海宁县",  # a county by the name it had before it became a city
        "梵蒂冈",  # a country
        "柏林市",  # a capital (柏林) and a place's suffix
    ],
)
def test_places_of_china_and_the_world_are_places(name):
    assert is_place(name)


@pytest.mark.parametrize(
    "word",
    [
        "上门",  # the words jieba's dictionary tags places
        "日志",
        "入门",
        "中村",  # a town's name without 镇 is no place of its own
        "偏远地区",  # a place's suffix after no place
    ],
)
def test_common_words_are_no_places(word):
    assert not is_place(word)


def test_every_name_has_two_characters_or_more():
    names = place_names()
    assert len(names) > 10_000 and min(map(len, names)) >= 2
