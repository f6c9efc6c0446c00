"""Entity and relation extraction: Chinese by dictionary part of speech and out-of-dictionary words,
Latin codes and names (their rules: test_latin_names.py), key phrases for queries only, protected terms,
synonym groups, common names, aliases, normalization, and co-occurrence weights. The expected entities
are written by hand."""

from __future__ import annotations

import random

import pytest

from engines.analysis import Analyzer, DictionaryEntry
from engines.graph_extraction import RELATION_NEIGHBOURS, RELATION_WINDOW, EntityExtractor, common_names


@pytest.fixture
def extractor() -> EntityExtractor:
    return EntityExtractor(Analyzer([DictionaryEntry("term", "鱼香肉丝"), DictionaryEntry("pattern", r"sky-\d+")]))


def entities(extractor, text) -> dict[str, tuple[str, int]]:
    return {entity.name: (entity.kind, entity.count) for entity in extractor.extract(text).entities}


def relation_weights(extractor, text) -> dict[tuple[str, str], float]:
    relations = extractor.extract(text).named_relations()
    return {tuple(sorted((source, target))): weight for source, target, weight, _ in relations}


def test_chinese_entities_come_from_dictionary_tags_and_compound_names(extractor):
    found = entities(extractor, "王师傅在成都的北京大学做菜，厨房很干净。粤海茶楼的点心师傅来自清华大学食堂。")
    assert found["王师傅"][0] == "person"  # a surname starts it
    assert found["成都"][0] == "place"
    assert found["北京大学"][0] == "organisation"
    assert found["粤海茶楼"][0] == found["清华大学食堂"][0] == "organisation"  # a name, then a shop's head
    assert not {"厨房", "点心", "师傅", "茶楼"} & found.keys()  # a plain noun alone is no entity
    assert not {"在", "的", "做", "很", "干净"} & found.keys()  # no verbs, particles or adjectives


@pytest.mark.parametrize("word", ["顾客", "齐全", "明白"])  # 胡萝卜 (a surname, rare) still is one
def test_a_common_word_the_dictionary_tags_a_person_is_no_person(extractor, word):
    assert word not in entities(extractor, f"{word}在王建国的店里。")


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
    assert not any(kind == "phrase" for kind, _ in found.values())  # a passage's key phrases are no entities
    assert any(entity.kind == "phrase" for entity in extractor.extract(text, query=True).entities)  # a query's are
    assert "the portalock pro" not in found  # a leading stopword is not part of a name


def test_synonym_group_terms_are_entities_of_their_group():
    extractor = EntityExtractor(Analyzer(), aliases={"宫保鸡丁": "kung pao chicken", "kung pao": "kung pao chicken"})
    text = "本店的宫保鸡丁很辣。Kung Pao is spicy, and the kung pao chicken sells out; kung paola is not a dish."
    found = entities(extractor, text)
    assert found["kung pao chicken"] == ("term", 3)
    assert "kung pao chicken" in extractor.query_names("宫保鸡丁多少钱")


def test_common_names_are_dropped_unless_curated():
    assert common_names({"客人": 6, "售价": 5, "ppr-9087": 1}, 50) == {"客人"}  # more than a tenth of 50
    assert common_names({"客人": 40}, 49) == frozenset()  # too few passages for a share to mean anything
    analyzer = Analyzer([DictionaryEntry("term", "售价")])
    extractor = EntityExtractor(analyzer, common=frozenset({"客人", "售价", "成都"}))
    found = entities(extractor, "客人在成都问售价。王建国回答了。")
    assert "售价" in found and "王建国" in found  # a curated term stays
    assert not {"客人", "成都"} & found.keys()


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


def test_a_mention_relates_to_the_next_few_entities_only(extractor):
    codes = [f"ppr-{number}" for number in range(1001, 1001 + RELATION_NEIGHBOURS + 2)]
    weights = relation_weights(extractor, " ".join(codes).upper())  # all well within RELATION_WINDOW
    first, *others = codes
    assert {(first, other) for other in others[:RELATION_NEIGHBOURS]} <= weights.keys()
    assert (first, others[RELATION_NEIGHBOURS]) not in weights  # one entity too far along
    assert (codes[1], others[RELATION_NEIGHBOURS]) in weights  # but the next mention's neighbour
    # a repeated entity is no new neighbour: both of its mentions count for the same pair
    repeated = relation_weights(extractor, "PPR-1001 PPR-1002 PPR-1002 PPR-1003 PPR-1004 PPR-1005")
    assert ("ppr-1001", "ppr-1005") in repeated
    assert repeated[("ppr-1001", "ppr-1002")] > repeated[("ppr-1001", "ppr-1003")]


def test_query_names_include_word_ngrams(extractor):
    names = extractor.query_names("鱼香肉丝的厨师 smart kitchen")
    assert {"鱼香肉丝", "厨师", "smart kitchen", "smart", "kitchen"} <= set(names)


def test_fuzzy_candidates_are_the_latin_names_a_query_writes_not_codes_words_or_resolved_ones(extractor):
    query = "Does the Portalok Pro of Skyline Home fit PPR-9078 doors at Lumière Café? 鱼香肉丝 patients"
    resolved = set(extractor.fuzzy_candidates(query, {"skyline home"}))
    assert {"portalok pro", "lumière café"} <= resolved
    assert not {name for name in resolved if "skyline home" in name}  # holds a resolved name
    candidates = set(extractor.fuzzy_candidates(query, set()))
    assert {"portalok pro", "skyline home", "lumière café"} <= candidates
    assert all(" " in name for name in candidates)  # no single words ("patients", "doors")
    assert not {"ppr-9078", "鱼香肉丝", "the"} & candidates
    assert extractor.fuzzy_candidates("are patients diagnosed", set()) == ["patients diagnosed"]  # a key phrase
    assert extractor.fuzzy_candidates("patients", set()) == []  # a word of the query is no misspelt name


@pytest.mark.parametrize(
    ("question", "names"),
    [
        ("Do I need a hub?", set()),
        ("Which Wi-Fi band does the hub use?", set()),
        ("How Do I Reset The PortaLock Pro", {"portalock pro"}),
        ("Does Skyline Home ship the PPR-9087?", {"skyline home"}),
        ("What Is The Warranty", set()),
    ],
)
def test_sentence_initial_capitals_and_function_words_make_no_name(extractor, question, names):
    found = {
        entity.name for entity in extractor.extract(question, query=True).entities if entity.kind in {"name", "phrase"}
    }
    question_words = {"do", "which", "how", "does", "what"}
    assert {name for name in found if " " in name and name.split()[0] in question_words} == set()
    assert names <= found
    assert not {"do i", "which wi", "how do i", "does skyline", "what is"} & found


def test_query_ngrams_of_function_words_only_are_no_names(extractor):
    names = extractor.query_names("How do I pair the hub?")
    assert {"pair", "hub", "pair the hub"} <= set(names)
    assert not {"how", "do i", "how do i", "the"} & set(names)


def test_out_of_dictionary_words_name_an_entity_only_before_a_names_head(extractor):
    from engines.analysis import OUT_OF_DICTIONARY, dictionary_tag

    assert dictionary_tag("渔安苑") == dictionary_tag("这张") == OUT_OF_DICTIONARY  # the HMM's words
    found = entities(extractor, "渔安苑位于香港仔海旁。这张专辑很好听。鹃城豆瓣厂在郫都区。")
    assert found["香港"][0] == "place"  # a dictionary word keeps its tag
    assert found["鹃城豆瓣厂"][0] == "organisation"  # a new word, then a maker's head
    assert not {"渔安苑", "专辑", "这张"} & found.keys()  # a new word or a plain noun alone is no entity


def test_extraction_cuts_no_han_run_again_that_analysis_cut_while_the_next_group_was_analyzed(extractor):
    """Ingestion extracts a group of passages while the next group is analyzed: the jieba words of the
    first group's runs must still be cached then (a cut costs more than the rest of the extraction)."""
    from engines import analysis
    from knowledge.ingestion.pipeline import EMBED_FLUSH_CHUNKS

    han = [chr(code) for code in range(0x4E00, 0x9FA6)]
    characters = random.Random(12).choices(han, k=2 * EMBED_FLUSH_CHUNKS * 160)
    runs = ["".join(characters[start : start + 10]) for start in range(0, len(characters), 10)]
    passages = ["，".join(runs[start : start + 16]) + "。" for start in range(0, len(runs), 16)]
    group, following = passages[:EMBED_FLUSH_CHUNKS], passages[EMBED_FLUSH_CHUNKS:]
    for passage in group + following:
        extractor.analyzer.analyze(passage)
    misses = analysis._han_words.cache_info().misses
    for passage in group:
        extractor.extract(passage)
    assert analysis._han_words.cache_info().misses == misses


# --- Names the text marks (engines.marked_names), in a KB with no curated vocabulary -------------------


@pytest.fixture
def uncurated() -> EntityExtractor:
    return EntityExtractor(Analyzer())


def marked(extractor, text) -> dict[str, str]:
    return {name: kind for name, (kind, _) in entities(extractor, text).items()}


def test_a_surname_and_a_title_name_a_person(uncurated):
    found = marked(uncurated, "店里新请了李经理，吴主厨做的菜要请钱老板尝。")
    assert found["李经理"] == found["吴主厨"] == found["钱老板"] == "person"  # jieba: 吴 + 主厨, 钱 + 老板
    assert not {"李经理", "向医生", "总经理", "医生"} & marked(uncurated, "身体不适请向医生咨询，总经理已同意。").keys()
    assert "华教授" not in marked(uncurated, "副院长王霖华教授派遣至韶关市法院挂职。")  # a given name's end


def test_the_agent_of_a_kitchen_or_a_makers_verb_is_a_name(uncurated):
    found = marked(uncurated, "TH-15 温湿度探头由深蓝传感出品，这道东坡肉由张师傅掌勺。")
    assert found["深蓝传感"] == "organisation"  # jieba cuts it 深蓝 + 传感: no dictionary name
    assert found["张师傅"] == "person" and found["东坡肉"] == "proper"  # what the chef cooks
    assert marked(uncurated, "这款电饭煲由日立生产。")["日立"] == "organisation"
    not_names = marked(
        uncurated, "产品由厂家统一生产，蛋糕由我们制作，雕塑由黏土制作，由阜阳雨润肉类加工有限公司供货。"
    )
    assert not {"厂家", "厂家统一", "我们", "黏土", "阜阳雨润肉类"} & not_names.keys()


def test_a_shops_signature_dishes_are_names(uncurated):
    assert marked(uncurated, "招牌菜鱼香肉丝售价 38 元。")["鱼香肉丝"] == "proper"
    found = marked(uncurated, "粤海茶楼的早茶招牌是虾饺和叉烧包。")
    assert found["虾饺"] == found["叉烧包"] == "proper"  # a list after the mark
    assert marked(uncurated, "湘味坊在长沙，剁椒鱼头是镇店之宝。")["剁椒鱼头"] == "proper"  # jieba: 剁 + 椒 + 鱼头
    assert not {"服务", "这", "虾饺"} & marked(uncurated, "这家店的招牌是服务，这是镇店之宝，虾饺卖完了。").keys()


def test_the_dish_of_a_recipes_clause_is_a_name(uncurated):
    assert marked(uncurated, "江南面馆在杭州，片儿川用雪菜、笋片和肉片做浇头。")["片儿川"] == "proper"
    assert not {"我们", "厨师"} & marked(uncurated, "我们用猪肉做馅。厨师用面粉做面包。").keys()


def test_book_title_marks_name_a_work_and_quotation_marks_a_name_the_text_says_is_one(uncurated):
    assert marked(uncurated, "复兴社还出版《中国革命》、《前途》等杂志。").keys() >= {"中国革命", "前途"}
    found = marked(uncurated, "这家仪表厂的品牌名为“深蓝传感”，附近的“海底捞”火锅店也用它。")
    assert found["深蓝传感"] == found["海底捞"] == "proper"
    stressed = marked(uncurated, "他说“个位”很重要，【注意】请勿拆机，店名叫「我们的家」。")
    assert not {"个位", "注意", "我们的家"} & stressed.keys()  # a word stressed, a label, a phrase


def test_a_marked_name_keeps_the_kind_the_dictionarys_rules_gave_the_same_words(uncurated):
    found = marked(uncurated, "《纽约时报》报道了此事。")
    assert found["纽约时报"] == "organisation"
