"""The shared analyzer: pure unit tests (no database, no model)."""

import json
import logging
import random
import re
import threading
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import jieba
import opencc
import pytest

from engines import analysis
from engines.analysis import (
    ANALYZER_VERSION,
    LUCENE_ENGLISH_STOPWORDS,
    Analyzer,
    DictionaryEntry,
    analyzer_for,
    default_stopwords,
    detect_language,
    is_cjk_query,
)

CMRC_CORPUS = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "cmrc2018" / "corpus.jsonl"
HAN_RUN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003ffff]+")

jieba.setLogLevel(logging.WARNING)


def term(value: str) -> DictionaryEntry:
    return DictionaryEntry(kind="term", value=value)


def pattern(value: str) -> DictionaryEntry:
    return DictionaryEntry(kind="pattern", value=value)


@pytest.fixture(scope="module")
def plain() -> Analyzer:
    return Analyzer()


# --- normalization -------------------------------------------------------------------------------


def test_full_width_is_folded_and_text_lowercased(plain):
    assert plain.tokens("ＰＰＲ－９０８７ ＨＥＬＬＯ") == ["ppr-9087", "ppr", "9087", "hello"]


def test_traditional_chinese_tokenizes_like_simplified(plain):
    assert plain.tokens("資訊軟體") == plain.tokens("资讯软体")
    assert plain.tokens("資訊軟體")  # not everything dropped


# --- protected terms ----------------------------------------------------------------------------


def test_product_code_gives_whole_and_parts_by_default(plain):
    assert plain.tokens("sky-10023908") == ["sky-10023908", "sky", "10023908"]


def test_protected_product_code_stays_whole_only():
    analyzer = Analyzer([term("SKY-10023908")])
    assert analyzer.tokens("sky-10023908") == ["sky-10023908"]
    assert analyzer.tokens("ＳＫＹ－１００２３９０８") == ["sky-10023908"]


@pytest.mark.parametrize("dictionary", [[], [term("PPR-9087")]], ids=["default", "protected"])
def test_identifier_query_overlaps_its_document(dictionary):
    analyzer = Analyzer(dictionary)
    document = set(analyzer.tokens("Replace the PPR-9087 valve before winter."))
    assert document & set(analyzer.tokens("PPR-9087"))
    assert document & set(analyzer.tokens("ｐｐｒ－９０８７"))


def test_identifier_typed_with_a_space_matches_its_parts(plain):
    assert set(plain.tokens("PPR 9087")) <= set(plain.tokens("PPR-9087 valve"))


def test_pattern_keeps_order_number_whole_inside_chinese():
    analyzer = Analyzer([pattern(r"ORD-\d{4}-\d{6}")])
    tokens = analyzer.tokens("帮我查下订单ORD-2026-000817的进度")
    assert "ord-2026-000817" in tokens
    assert not {"ord", "2026", "000817"} & set(tokens)
    assert tokens.index("订单") < tokens.index("ord-2026-000817") < tokens.index("进度")


def test_protected_chinese_term_is_one_token_and_the_dictionary_changes_segmentation():
    dish, gateway = "鱼香肉丝", "云原生网关"
    text = f"我想吃{dish}，顺便部署{gateway}"
    default = Analyzer().tokens(text)
    protected = Analyzer([term(dish), term(gateway)]).tokens(text)
    assert dish in protected
    assert gateway in protected
    assert gateway not in default  # jieba splits it without the dictionary (it happens to know the dish)
    assert protected != default


def test_traditional_dictionary_term_matches_simplified_text():
    assert "鱼香肉丝" in Analyzer([term("魚香肉絲")]).tokens("点一份鱼香肉丝")


def test_latin_term_never_matches_inside_a_longer_code():
    analyzer = Analyzer([term("ppr-9087")])
    assert "ppr-9087" not in analyzer.tokens("xppr-90871")
    assert "ppr-9087" not in analyzer.tokens("ppr-90871")
    assert "ppr-9087" not in analyzer.tokens("xppr-9087")
    assert analyzer.tokens("(ppr-9087),") == ["ppr-9087"]
    assert "ppr-9087" in analyzer.tokens("型号ppr-9087的阀门")  # Han neighbours are no word boundary problem


def test_pattern_never_matches_inside_a_longer_code():
    analyzer = Analyzer([pattern(r"ord-\d{4}-\d{6}")])
    assert "ord-2026-000817" not in analyzer.tokens("xord-2026-0008171")
    assert "ord-2026-000817" in analyzer.tokens("订单ord-2026-000817。")


def test_chinese_term_needs_no_boundary():
    assert "鱼香肉丝" in Analyzer([term("鱼香肉丝")]).tokens("今天吃金鱼香肉丝瓜")


def test_longest_protected_term_wins():
    analyzer = Analyzer([term("wi-fi"), term("wi-fi 6")])
    assert analyzer.tokens("wi-fi 6 router") == ["wi-fi_6", "router"]
    assert analyzer.tokens("wi-fi 6e") == ["wi-fi", "6e"]


def test_multiword_term_is_one_token_without_spaces_and_matches_any_whitespace():
    analyzer = Analyzer([term("Wi-Fi 6")])
    assert analyzer.tokens("Supports WI-FI\n  6 and wi-fi 6E") == ["support", "wi-fi_6", "wi-fi", "wi", "fi", "6e"]


def test_invalid_pattern_is_skipped_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="engines.analysis"):
        analyzer = Analyzer([pattern("ord-(\\d+"), term("sku-1")])
    assert "invalid dictionary pattern" in caplog.text
    assert analyzer.tokens("sku-1 ord-(12") == ["sku-1", "ord", "12"]


def test_pattern_that_can_match_nothing_protects_nothing(caplog):
    with caplog.at_level(logging.WARNING, logger="engines.analysis"):
        assert Analyzer([pattern(r"\d*")]).tokens("abc 42") == ["abc", "42"]
    assert "matches the empty string" in caplog.text
    assert Analyzer([pattern(r"(?=4)")]).tokens("abc 42") == ["abc", "42"]  # empty only in context


def test_unknown_dictionary_kind_is_rejected():
    with pytest.raises(ValueError, match="unknown dictionary entry kind"):
        Analyzer([DictionaryEntry(kind="synonym", value="x")])


# --- English ------------------------------------------------------------------------------------


def test_english_words_are_stemmed(plain):
    assert plain.tokens("installations installing") == ["instal", "instal"]


def test_lucene_stopwords_are_dropped(plain):
    assert len(LUCENE_ENGLISH_STOPWORDS) == 33
    assert plain.tokens("The history of the science") == ["histori", "scienc"]


def test_custom_stopwords_replace_the_default():
    analyzer = Analyzer(stopwords=frozenset({"Foo", "的"}))
    assert analyzer.tokens("the foo bar") == ["the", "bar"]
    assert "的" not in analyzer.tokens("我的电脑")


def test_possessive_s_is_removed(plain):
    assert plain.tokens("the battery's life") == plain.tokens("battery life") == ["batteri", "life"]
    assert plain.tokens("the battery\u2019s life") == ["batteri", "life"]


def test_numbers_are_kept_as_written(plain):
    assert plain.tokens("released 2023 with 042 items, v2.3.1") == [
        "releas",
        "2023",
        "042",
        "item",
        "v2.3.1",
        "v2",
        "3",
        "1",
    ]


def test_punctuation_symbols_and_emoji_are_dropped(plain):
    assert plain.tokens("hello, world! 🎉🚀 ... ★ — ok? 。，！") == ["hello", "world", "ok"]


def test_underscore_and_dotted_compounds(plain):
    assert plain.tokens("user_id e-221") == ["user_id", "user", "id", "e-221", "e", "221"]


# --- mixed text and the analyzed string -----------------------------------------------------------


def test_mixed_text_keeps_text_order(plain):
    tokens = plain.tokens("帮我查下订单 sky-10023908 的进度")
    assert tokens == jieba.lcut("帮我查下订单") + ["sky-10023908", "sky", "10023908"] + jieba.lcut("的进度")


def test_analyze_is_tokens_joined_by_single_spaces():
    analyzer = Analyzer([term("Wi-Fi 6"), pattern(r"ord-\d{4}-\d{6}")])
    text = "  Wi-Fi 6 路由器，订单ORD-2026-000817 the user's   café!! 🎉 資訊軟體  "
    tokens = analyzer.tokens(text)
    analyzed = analyzer.analyze(text)
    assert analyzed == " ".join(tokens)
    assert analyzed.split(" ") == tokens  # no empty tokens, no leading or trailing space
    assert all(token and not any(char.isspace() for char in token) for token in tokens)
    assert "wi-fi_6" in tokens
    assert analyzer.analyze("") == analyzer.analyze(" the, of! ") == ""


# --- versions, fingerprints, caching ---------------------------------------------------------------


def test_version_depends_on_stopwords_only():
    version = Analyzer().version
    assert version.startswith(f"{ANALYZER_VERSION}-")
    assert Analyzer([term("x")]).version == version
    assert Analyzer(stopwords=LUCENE_ENGLISH_STOPWORDS | {"foo"}).version != version
    assert Analyzer(stopwords=frozenset({"Foo"})).version == Analyzer(stopwords=frozenset({"foo"})).version


def test_dictionary_fingerprint_is_stable_and_distinguishes_dictionaries():
    entries = [term("sky-10023908"), pattern(r"ord-\d{4}-\d{6}"), term("鱼香肉丝")]
    fingerprint = Analyzer(entries).dictionary_fingerprint
    assert fingerprint
    assert Analyzer(reversed(entries)).dictionary_fingerprint == fingerprint
    assert Analyzer(entries + entries[:1]).dictionary_fingerprint == fingerprint
    assert Analyzer(entries[:2]).dictionary_fingerprint != fingerprint
    assert Analyzer([term("ord-\\d{4}-\\d{6}")]).dictionary_fingerprint != Analyzer(entries[1:2]).dictionary_fingerprint
    assert Analyzer().dictionary_fingerprint == ""


def test_analyzer_for_builds_each_dictionary_once():
    entries = [term("sky-10023908"), term("鱼香肉丝")]
    analyzer = analyzer_for(entries)
    assert analyzer_for(reversed(entries)) is analyzer
    assert analyzer_for(entries[:1]) is not analyzer
    assert analyzer.tokens("sky-10023908") == ["sky-10023908"]


def test_default_stopwords_come_from_settings(settings):
    assert default_stopwords() == LUCENE_ENGLISH_STOPWORDS
    settings.ANALYZER_EXTRA_STOPWORDS = ["foo"]
    assert default_stopwords() == LUCENE_ENGLISH_STOPWORDS | {"foo"}
    assert "foo" not in analyzer_for([]).tokens("foo bar")
    settings.ANALYZER_STOPWORDS = ["bar"]
    assert default_stopwords() == {"bar", "foo"}


def test_word_cache_starting_over_gives_the_same_tokens(monkeypatch):
    text = "Alpha beta's gamma-delta 42, alpha BETA epsilon"
    expected = Analyzer(stopwords=frozenset({"gamma"})).tokens(text)
    monkeypatch.setattr(analysis, "WORD_CACHE_SIZE", 3)
    assert Analyzer(stopwords=frozenset({"gamma", "unused"})).tokens(text) == expected


# --- language -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("如何更换滤芯", "zh"),
        ("如何 更換 濾芯", "zh"),
        ("PPR-9087 怎么换", "en"),  # 3 ideographs among 11 visible characters: 27 %
        ("PPR-9087 怎么更换", "zh"),  # 4 of 12: 33 %
        ("how to replace the filter", "en"),
        ("", "en"),
        ("   ", "en"),
    ],
)
def test_detect_language(text, language):
    assert detect_language(text) == language
    assert is_cjk_query(text) == (language == "zh")


# --- jieba: identical segmentation, used only for Han runs, thread safety -------------------------


def _english_text(size: int) -> str:
    words = (
        "the patient cohort showed significant improvement after treatment with low dose aspirin while "
        "control subjects receiving placebo reported fewer adverse events during follow up visits and "
        "researchers measured blood pressure cholesterol levels inflammation markers using standardized "
        "protocols across multiple clinical sites in europe asia america between 2015 2021 results suggest "
        "that cardiovascular risk decreased substantially among older adults with diabetes hypertension"
    ).split()
    rng = random.Random(0)
    sentences = []
    length = 0
    while length < size:
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(8, 20))).capitalize()
        sentence += f" (n = {rng.randint(10, 999)}; IL-{rng.randint(1, 20)}, p<0.05)."
        sentences.append(sentence)
        length += len(sentence) + 1
    return " ".join(sentences)


@pytest.fixture
def segmented(monkeypatch) -> Iterator[list[str]]:
    """What reaches jieba: the analyzer's segmenter replaced by one that records its input."""
    texts: list[str] = []

    class Recorder:
        def lcut(self, text: str, HMM: bool) -> list[str]:  # jieba's spelling
            texts.append(text)
            return [text]

    monkeypatch.setattr(analysis, "_segmenter", Recorder)
    analysis._han_words.cache_clear()  # runs cut before would not reach it; its cuts must not outlive it
    yield texts
    analysis._han_words.cache_clear()


def test_only_han_runs_reach_jieba(segmented):
    Analyzer([term("sky-1")]).tokens("The café's sky-1 v2.3 订单ORD-1的進度, 🎉 naïve Москва 東京タワー")
    assert segmented == ["订单", "的进度", "东京"]


def test_english_never_goes_through_jieba(segmented):
    """jieba on English is slow (its HMM walks every Latin run): a long English text must not reach
    it once. (Speed belongs in bench/, not in a timed test.)"""
    tokens = Analyzer().tokens(_english_text(20_000))
    assert len(tokens) > 2_000 and segmented == []


def _cmrc_han_runs(count: int) -> list[str]:
    runs: list[str] = []
    with CMRC_CORPUS.open(encoding="utf-8") as corpus:
        for line in corpus:
            runs.extend(run for run in HAN_RUN.findall(json.loads(line)["text"]) if len(run) >= 4)
            if len(runs) >= count:
                return runs[:count]
    return runs


@pytest.mark.skipif(not CMRC_CORPUS.exists(), reason=f"shared dataset missing: {CMRC_CORPUS}")
def test_han_runs_segment_exactly_like_jieba(plain):
    t2s = opencc.OpenCC("t2s")
    runs = _cmrc_han_runs(400)
    assert len(runs) == 400
    for run in runs:
        assert plain.tokens(run) == jieba.lcut(t2s.convert(unicodedata.normalize("NFKC", run))), run


def test_concurrent_analysis_matches_sequential():
    dictionary = [term("sky-10023908"), term("鱼香肉丝"), pattern(r"ord-\d{4}-\d{6}")]
    texts = [
        "帮我查下订单ORD-2026-000817的进度",
        "資訊軟體與電腦網路的發展，以及 sky-10023908 的安裝",
        _english_text(3000),
        "我想吃鱼香肉丝，the battery's installations ＰＰＲ－９０８７",
    ] * 5
    expected = [Analyzer(dictionary).tokens(text) for text in texts]
    analyzer = Analyzer(dictionary, stopwords=LUCENE_ENGLISH_STOPWORDS | {"zzz-unused"})  # a cold word cache
    barrier = threading.Barrier(4)
    results: list[list[list[str]]] = [[] for _ in range(4)]

    def work(slot: int) -> None:
        barrier.wait()
        for _ in range(3):
            results[slot].append([analyzer.tokens(text) for text in texts])

    threads = [threading.Thread(target=work, args=(slot,)) for slot in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(run == expected for slot in results for run in slot)
    assert len(results[0]) == 3


def test_graph_extraction_reuses_the_words_analysis_just_cut(segmented):
    """Ingestion analyzes a passage, then extracts its entities: jieba cuts each Han run once."""
    Analyzer().tokens("蜀香小馆的招牌菜 PPR-9087 鱼香肉丝")
    analysis.part_of_speech("蜀香小馆的招牌菜")
    analysis.part_of_speech("鱼香肉丝")
    assert segmented == ["蜀香小馆的招牌菜", "鱼香肉丝"]
