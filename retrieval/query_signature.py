"""The tokens of a query that a semantic cache hit must repeat exactly: numbers, codes, dates, question
words and the tenant's protected terms.

Two queries a sentence embedding places close together ("status of order ORD-2026-000817" and "status
of order ORD-2026-000818", "3-day return" and "30-day return") have different answers. The semantic
cache (``retrieval.semantic_cache``) reuses an entry only when this signature is equal as well as the
cosine high enough, so such queries never share one. Erring towards more tokens only costs hits.
"""

from __future__ import annotations

import hashlib
import re

from engines.analysis import Analyzer, han_runs, latin_compounds, normalize

_DIGIT = re.compile(r"\d")
_MEASURE = re.compile(r"(\d+(?:[.,]\d+)*)-[^\W\d_]+")  # "3-day", "1.7-litre": the number is what counts
# Chinese numerals with the unit they count ("三天", "两年", "第3"): alone, 一 is part of too many words.
_HAN_NUMBER = re.compile(r"第?[零〇一二两三四五六七八九十百千万亿\d]+[个天年月日号周岁次元块件台只张层楼位名斤米克分秒]|第[零〇一二两三四五六七八九十百千万亿]+")  # fmt: skip
# Words that name a number, a day, a month or a time relative to now.
_WORDS = frozenset(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand million "
    "billion half double twice first second third fourth fifth last next previous today tomorrow yesterday tonight "
    "monday tuesday wednesday thursday friday saturday sunday weekend january february march april may june "
    "july august september october november december jan feb mar apr jun jul aug sep sept oct nov dec".split()
)
# What a question asks for: "when was the committee established" and "who led the committee" embed alike.
_QUESTION_WORDS = frozenset("who whom whose when where why which what how".split())
_HAN_WORDS = (
    "今天", "明天", "昨天", "前天", "后天", "今年", "明年", "去年", "本周", "上周", "下周", "本月", "上个月", "下个月",
    "周末", "星期", "礼拜", "上午", "下午", "晚上", "凌晨", "谁", "什么时候", "何时", "哪里", "哪儿", "为什么", "多少",
)  # fmt: skip


def exact_tokens(text: str, analyzer: Analyzer) -> list[str]:
    """The query's tokens that must match exactly, normalized (NFKC, casefolded, Simplified), each once, sorted."""
    normalized = normalize(text)
    tokens = set(analyzer.protected_terms(text))
    for match in latin_compounds(normalized):
        word = match.group()
        if measure := _MEASURE.fullmatch(word):
            tokens.add(measure.group(1))
        elif _DIGIT.search(word) or word in _WORDS:
            tokens.add(word)
        elif (asked := word.split("'")[0]) in _QUESTION_WORDS:  # "what's": what
            tokens.add(asked)
    for run in han_runs(normalized):
        tokens.update(_HAN_NUMBER.findall(run.group()))
        tokens.update(word for word in _HAN_WORDS if word in run.group())
    return sorted(tokens)


def signature(text: str, analyzer: Analyzer) -> str:
    """A short digest of :func:`exact_tokens` (equal tokens, equal digests)."""
    return hashlib.sha256("\x1f".join(exact_tokens(text, analyzer)).encode()).hexdigest()[:32]
