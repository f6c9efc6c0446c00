"""Typed, directed relations stated by a sentence (Chinese over jieba's words and tags, English by word
patterns), against (head, relation, tail) triples written by hand; where no relation is stated, the
pair only co-occurs. Also: a curator's rules as the extraction applies them."""

from __future__ import annotations

import pytest

from engines.analysis import Analyzer, DictionaryEntry
from engines.graph_extraction import STATED_WEIGHT, Curation, EntityExtractor
from engines.graph_relations import relation_name

# The curated vocabulary the sentences name: a plain noun alone (锂电池, 门锁, 川菜) is no entity, so the
# patterns are tested on terms an admin protected, as a KB with a vocabulary has them.
TERMS = [
    "宁德时代", "锁匠科技", "中央厨房", "鱼香肉丝", "PortaLock Pro", "锂电池", "菜品", "门锁", "华为", "手机", "厨房",
    "空气净化器", "政策", "川菜",
]  # fmt: skip


@pytest.fixture(scope="module")
def extractor() -> EntityExtractor:
    return EntityExtractor(Analyzer([DictionaryEntry("term", term) for term in TERMS]))


def typed(extractor: EntityExtractor, text: str) -> set[tuple[str, str, str]]:
    return {(source, kind, target) for source, target, _, kind in extractor.extract(text).named_relations() if kind}


def co_occurring(extractor: EntityExtractor, text: str) -> set[frozenset[str]]:
    return {frozenset((s, t)) for s, t, _, kind in extractor.extract(text).named_relations() if not kind}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("PPR-9087 由锁匠科技生产。", ("ppr-9087", "made_by", "锁匠科技")),
        ("锂电池由宁德时代供应。", ("锂电池", "supplied_by", "宁德时代")),
        ("本店所有菜品均由中央厨房统一配送。", ("菜品", "supplied_by", "中央厨房")),
        ("门锁的供应商是宁德时代。", ("门锁", "supplied_by", "宁德时代")),
        ("宁德时代为门锁供货。", ("门锁", "supplied_by", "宁德时代")),
        ("华为生产手机。", ("手机", "made_by", "华为")),
        ("PPR-9087 使用 BT-200 电池。", ("ppr-9087", "uses", "bt-200")),
        ("厨房采用空气净化器。", ("厨房", "uses", "空气净化器")),
        ("退货政策适用于所有门锁。", ("政策", "applies_to", "门锁")),
        ("鱼香肉丝属于川菜。", ("鱼香肉丝", "part_of", "川菜")),
        ("锂电池是门锁的一部分。", ("锂电池", "part_of", "门锁")),
    ],
)
def test_chinese_statements(extractor, text, expected):
    assert typed(extractor, text) == {expected}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The PortaLock Pro is made by Acme Locks.", ("portalock pro", "made_by", "acme locks")),
        ("The BT-200 is supplied by Shenzhen Power.", ("bt-200", "supplied_by", "shenzhen power")),
        ("Acme Locks supplies the BT-200.", ("bt-200", "supplied_by", "acme locks")),
        ("Acme Locks manufactures the PPR-9087.", ("ppr-9087", "made_by", "acme locks")),
        ("The PPR-9087 uses the BT-200 battery.", ("ppr-9087", "uses", "bt-200")),
        ("The BT-200 is used by the PPR-9087.", ("ppr-9087", "uses", "bt-200")),
        ("The Return Policy applies to PPR-9087 orders.", ("return policy", "applies_to", "ppr-9087")),
        ("BT-200 is part of the PortaLock Pro kit.", ("bt-200", "part_of", "portalock pro")),
        ("The BT-200 belongs to the Power Line family.", ("bt-200", "part_of", "power line")),
        ("The PPR-9087 door lock is made by Skyline Home.", ("ppr-9087", "made_by", "skyline home")),  # its noun
    ],
)
def test_english_statements(extractor, text, expected):
    assert typed(extractor, text) == {expected}


@pytest.mark.parametrize(
    ("text", "pair"),
    [
        ("该政策不适用于宁德时代。", {"政策", "宁德时代"}),  # negated
        ("PPR-9087 并非由锁匠科技生产。", {"ppr-9087", "锁匠科技"}),  # negated
        ("PPR-9087 和锁匠科技都在深圳。", {"ppr-9087", "锁匠科技"}),  # no relation stated
        ("PPR-9087 由锁匠科技检测。", {"ppr-9087", "锁匠科技"}),  # 由 ... 检测: no pattern's verb
        ("PPR-9087，锁匠科技生产线。", {"ppr-9087", "锁匠科技"}),  # a comma between them
        ("The PortaLock Pro is not made by Acme Locks.", {"portalock pro", "acme locks"}),  # negated
        ("Acme Locks and Shenzhen Keys sell the PPR-9087.", {"acme locks", "shenzhen keys"}),  # no pattern
        ("The PPR-9087 never uses the BT-200 battery.", {"ppr-9087", "bt-200"}),  # negated
        ("The PPR-9087 ships parts made by Skyline Home.", {"ppr-9087", "skyline home"}),  # a verb, not its noun
    ],
)
def test_no_statement_leaves_co_occurrence_only(extractor, text, pair):
    assert typed(extractor, text) == set()
    assert frozenset(pair) in co_occurring(extractor, text)


def test_a_stated_pair_is_typed_instead_of_co_occurring_and_weighs_more(extractor):
    text = "PPR-9087 由锁匠科技生产，在成都销售。"
    relations = {(s, t): (w, kind) for s, t, w, kind in extractor.extract(text).named_relations()}
    weight, kind = relations["ppr-9087", "锁匠科技"]
    assert kind == "made_by" and weight > STATED_WEIGHT
    assert ("锁匠科技", "ppr-9087") not in relations  # one relation for the pair, directed head -> tail
    assert any(kind == "" for _, kind in relations.values())  # the other pairs still co-occur


def test_a_walk_against_a_relation_reads_its_inverse():
    assert relation_name("made_by", reversed_=False) == "made_by"
    assert relation_name("made_by", reversed_=True) == "makes"
    assert relation_name("supplied_by", reversed_=True) == "supplies"
    assert relation_name("located_in", reversed_=True) == "inverse_located_in"  # an LLM's kind
    assert relation_name("", reversed_=True) == ""


def test_curation_merges_renames_and_deletes_at_extraction():
    curation = Curation(
        renamed={"锁匠": "锁匠科技", "锁匠科技": "锁匠科技", "净化器": "空气净化器"},
        labels={"锁匠科技": "锁匠科技有限公司"},
        deleted=frozenset({"售价"}),
    )
    terms = [DictionaryEntry("term", term) for term in ("锁匠科技", "锁匠", "净化器", "售价")]
    extractor = EntityExtractor(Analyzer(terms), curation=curation)
    extraction = extractor.extract("锁匠的空气净化器售价 1699 元，由锁匠科技生产。")
    by_name = {entity.name: entity for entity in extraction.entities}
    assert by_name["锁匠科技"].label == "锁匠科技有限公司" and by_name["锁匠科技"].count == 2  # merged + renamed
    assert "锁匠" not in by_name and "售价" not in by_name
    assert "空气净化器" in by_name and "净化器" not in by_name
    assert extractor.query_names("锁匠") == ["锁匠科技"]


def test_a_curation_chain_resolves_and_a_cycle_stops():
    assert Curation(renamed={"a": "b", "b": "c"}).resolve("a") == "c"
    assert Curation(renamed={"a": "b", "b": "a"}).resolve("a") == "b"
