"""Entity and relation extraction: Chinese by part of speech, Latin codes, names and key phrases,
protected terms, aliases, normalization, and co-occurrence weights."""
from __future__ import annotations

import pytest

from engines.analysis import Analyzer, DictionaryEntry
from engines.graph_extraction import RELATION_WINDOW, EntityExtractor


@pytest.fixture
def extractor() -> EntityExtractor:
    return EntityExtractor(Analyzer([DictionaryEntry("term", "鱼香肉丝"), DictionaryEntry("pattern", r"sky-\d+")]))


def entities(extractor, text) -> dict[str, tuple[str, int]]:
    return {entity.name: (entity.kind, entity.count) for entity in extractor.extract(text).entities}


def relation_weights(extractor, text) -> dict[tuple[str, str], float]:
    return {(r.source, r.target): r.weight for r in extractor.extract(text).relations}


def test_chinese_entities_come_from_parts_of_speech(extractor):
    found = entities(extractor, "王师傅在成都的北京大学食堂做菜，厨房很干净。")
    assert found["王师傅"][0] == "person"
    assert found["成都"][0] == "place"
    assert found["北京大学"][0] == "organisation"
    assert found["厨房"][0] == "noun"
    assert not {"在", "的", "做", "很", "干净"} & found.keys()  # no verbs, particles or adjectives


def test_protected_terms_are_entities_counted_per_occurrence(extractor):
    found = entities(extractor, "招牌菜鱼香肉丝，鱼香肉丝没有鱼。SKY-30452 监测油烟。")
    assert found["鱼香肉丝"] == ("term", 2)
    assert found["sky-30452"] == ("term", 1)


def test_latin_codes_names_and_key_phrases(extractor):
    text = "The PortaLock Pro door lock PPR-9087 ships with a battery pack PPR-9087-BAT and a 24-month warranty."
    found = entities(extractor, text)
    assert found["ppr-9087"][0] == found["ppr-9087-bat"][0] == "code"
    assert found["portalock pro"][0] == "name"
    assert "24-month" not in found  # a code starts with a letter
    assert any(kind == "phrase" for kind, _ in found.values())
    assert "the portalock pro" not in found  # a leading stopword is not part of a name


def test_names_are_normalized_and_resolved_through_aliases():
    extractor = EntityExtractor(Analyzer(), aliases={"skyline": "skyline home"})
    found = entities(extractor, "ＰＰＲ－９０８７ 與 臺灣 Skyline")
    assert "ppr-9087" in found  # NFKC and case
    assert "台湾" in found  # Traditional -> Simplified
    query = extractor.query_names("Does Skyline ship PPR-9087?")
    assert "skyline home" in query and "ppr-9087" in query and "skyline" not in query


def test_relations_weigh_distance_and_frequency(extractor):
    near = relation_weights(extractor, "PPR-9087 SKY-30452")
    far = relation_weights(extractor, "PPR-9087 " + "x " * 60 + "SKY-30452")
    twice = relation_weights(extractor, "PPR-9087 SKY-30452. PPR-9087 SKY-30452")
    pair = ("ppr-9087", "sky-30452")
    assert 0 < far[pair] < near[pair] < twice[pair]
    beyond = relation_weights(extractor, "PPR-9087 " + "x " * RELATION_WINDOW + "SKY-30452")
    assert pair not in beyond
    assert all(source < target for source, target in near)


def test_query_names_include_word_ngrams(extractor):
    names = extractor.query_names("鱼香肉丝的厨师 smart kitchen")
    assert {"鱼香肉丝", "厨师", "smart kitchen", "smart", "kitchen"} <= set(names)


def test_fuzzy_candidates_are_long_latin_names_not_codes_stopwords_or_resolved_ones(extractor):
    names = ["portalok pro", "ppr-9078", "pro", "the", "skyline", "skyline home", "鱼香肉丝", "lumière", "there"]
    assert extractor.fuzzy_candidates(names, {"skyline home"}) == ["portalok pro", "lumière"]
    assert extractor.fuzzy_candidates(names, set()) == ["portalok pro", "skyline", "skyline home", "lumière"]
