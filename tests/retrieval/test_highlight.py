"""Highlights from the analyzer's own tokens: what BM25 matched, escaped everywhere else."""

import pytest

from engines.analysis import DictionaryEntry, analyzer_for
from retrieval.highlight import highlight, terms


@pytest.fixture
def analyzer():
    return analyzer_for([])


def test_a_product_code_is_marked_whole_and_its_parts_match_it(analyzer):
    text = "Replace the Skyline hub sky-10023908 firmware."
    assert highlight(analyzer, text, set(analyzer.tokens("SKY-10023908"))) == (
        "Replace the Skyline hub <mark>sky-10023908</mark> firmware."
    )
    assert "<mark>sky-10023908</mark>" in highlight(analyzer, text, set(analyzer.tokens("10023908")))


def test_chinese_is_marked_by_jieba_words_and_english_by_stems(analyzer):
    query_tokens = set(analyzer.tokens("订单进度 batteries"))
    html = highlight(analyzer, "订单ORD-1的物流进度：battery stored", query_tokens)
    assert html == "<mark>订单</mark>ORD-1的物流<mark>进度</mark>：<mark>battery</mark> stored"


def test_everything_but_the_marks_is_escaped(analyzer):
    html = highlight(analyzer, '<img src=x onerror="alert(1)"> kettle & <b>tea</b>', {"kettl", "b"})
    assert html == (
        "&lt;img src=x onerror=&quot;alert(1)&quot;&gt; <mark>kettle</mark> &amp; "
        "&lt;<mark>b</mark>&gt;tea&lt;/<mark>b</mark>&gt;"
    )


def test_a_protected_pattern_is_one_term(analyzer):
    protected = analyzer_for([DictionaryEntry("pattern", r"ORD-\d{4}-\d{6}")])
    text = "订单 ORD-2026-000817 进度"
    assert [term.surface(text) for term in terms(protected, text)] == ["订单", "ORD-2026-000817", "进度"]
    assert [t.tokens for t in terms(protected, "ORD-2026-000817")] == [frozenset({"ord-2026-000817"})]


def test_a_traditional_chinese_word_folded_by_the_analyzer_has_no_span(analyzer):
    # 訂單 is indexed as 订单: no span of the raw text is that token, so it is not marked (nor misplaced)
    assert highlight(analyzer, "訂單", set(analyzer.tokens("订单"))) == "訂單"
