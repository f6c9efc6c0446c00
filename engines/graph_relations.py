"""Typed, directed relations a sentence states between two of a passage's entity mentions.

A relation is read from the words between two mentions (and, for "X 由 Y 生产", the words right after
the second), which must be a pattern's words and nothing else: a negation, a comma or any other word
between them breaks it ("X 不适用于 Y", "X is not made by Y": no relation, co-occurrence only). Chinese
gaps are matched over jieba's words and their part-of-speech tags (``engines.analysis.part_of_speech``,
the dictionary's tags, as ``jieba.posseg`` gives them without its HMM): adverbs (``d``) such as 均 or 也
may stand in a pattern, negating ones may not. English gaps are matched by word patterns.

Mentions that touch (only spaces between them) are one run: "智能 门锁", "宁德 时代"; a run is
represented by its most name-like mention (protected term, code, capitalized name, organisation...
before plain nouns), then the longest, then the last (a Chinese compound's head comes last).

Kinds and their direction, head -> tail: ``supplied_by`` (X 由 Y 供应, X is supplied by Y, Y supplies
X), ``made_by`` (X 由 Y 生产, X is made by Y, Y makes X), ``uses`` (X 使用 Y, X uses Y), ``applies_to``
(X 适用于 Y, X applies to Y), ``part_of`` (X 属于 Y, X 是 Y 的一部分, X belongs to / is part of Y).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from engines.analysis import part_of_speech

SUPPLIED_BY, MADE_BY, USES, APPLIES_TO, PART_OF = "supplied_by", "made_by", "uses", "applies_to", "part_of"
# A path that walks a typed relation from its tail to its head names it so (retrieval's graph leg).
INVERSE = {SUPPLIED_BY: "supplies", MADE_BY: "makes", USES: "used_by", APPLIES_TO: "covered_by", PART_OF: "has_part"}


def relation_name(kind: str, *, reversed_: bool) -> str:
    """A relation's kind as read in the direction walked: from its tail to its head, the inverse
    (``INVERSE``; another kind, an LLM's, as ``inverse_<kind>``)."""
    if not reversed_ or not kind:
        return kind
    return INVERSE.get(kind, f"inverse_{kind}")


MAX_GAP_CHARS = 24  # farther apart, two mentions are no subject and object of one short statement
# Entity kinds by how well they name a thing (a run's representative); unknown kinds rank last.
_NAME_RANK = {
    kind: rank
    for rank, kind in enumerate(
        ["term", "code", "name", "organisation", "proper", "person", "triple", "phrase", "noun", "place"]
    )
}

# --- Chinese: the gap's words once the free adverbs are dropped ------------------------------------
_NEGATIONS = frozenset("不 没 没有 未 无 非 别 勿 不再 并未 从未 尚未 从不 并非 决不 绝不 不会 不能".split())
# fillers not tagged d: manner ("统一配送") and quantifiers ("适用于所有门锁")
_FREE_WORDS = frozenset("统一 负责 独家 专门 全部 主要 一律 目前 现在 现 所有 各 各类 各种 一切 全体".split())
_MAKE_VERBS = frozenset("生产 制造 出品 制作 加工 研制 研发 生产制造".split())
_SUPPLY_VERBS = frozenset("供应 供货 提供 配送 供给 供".split())
_USE_VERBS = frozenset("使用 采用 选用 搭载 用".split())
_VERBS = _MAKE_VERBS | _SUPPLY_VERBS | _USE_VERBS
_PART_NOUNS = frozenset("一部分 部分 组成部分".split())
_SUPPLIER_NOUNS = frozenset("供应商 供货商 供应方 供货方".split())
_MAKER_NOUNS = frozenset("生产商 制造商 厂商 厂家 生产厂家 生产方 制造方".split())
_IS = frozenset("是 为".split())

# --- English: the gap in full (lower case), optional articles at its end -----------------------------
_BE = r"(?:(?:is|are|was|were|will\s+be|has\s+been|have\s+been)\s+)?"
_ADV = r"(?:(?:also|exclusively|mainly|solely|only|directly|currently|now|always)\s+)?"
_DET = r"(?:\s+(?:the|a|an))?"
# One or two lower-case words between a name and its verb: the name's common noun ("the PPR-9087 door lock
# is made by"), dropped only before a form of "be", so a verb of its own ("sells products made by") is not.
_HEAD_NOUN = re.compile(r"(?:[a-z][a-z-]*\s+){1,2}(?=(?:is|are|was|were|will\s+be|has\s+been|have\s+been)\s)")
_ENGLISH: list[tuple[re.Pattern[str], str, bool]] = [  # (gap, kind, reversed: the second mention is the head)
    (re.compile(rf"{_BE}{_ADV}(?:supplied|provided|delivered)\s+by{_DET}"), SUPPLIED_BY, False),
    (re.compile(rf"{_BE}{_ADV}(?:made|manufactured|produced|built|developed)\s+by{_DET}"), MADE_BY, False),
    (re.compile(rf"{_ADV}(?:supplies|supply|supplied|provides|provide)(?:\s+the)?"), SUPPLIED_BY, True),
    (re.compile(rf"{_ADV}(?:makes|make|manufactures|manufacture|produces|produce|builds)(?:\s+the)?"), MADE_BY, True),
    (re.compile(rf"{_BE}{_ADV}used\s+by{_DET}"), USES, True),
    (re.compile(rf"{_ADV}(?:uses|use|is\s+using|are\s+using|runs\s+on|run\s+on){_DET}"), USES, False),
    (re.compile(rf"{_ADV}(?:applies|apply)\s+to{_DET}|{_BE}{_ADV}applicable\s+to{_DET}"), APPLIES_TO, False),
    (re.compile(rf"{_ADV}(?:belongs|belong)\s+to{_DET}|{_BE}{_ADV}(?:a\s+)?part\s+of{_DET}"), PART_OF, False),
]


@dataclass(frozen=True)
class Span:
    """A mention in the (normalized) text: its entity's index, where it starts and ends, its kind."""

    entity: int
    start: int
    end: int
    kind: str


@dataclass(frozen=True)
class _Run:
    start: int
    end: int
    entity: int  # the representative mention's entity


def stated_relations(
    text: str, spans: Sequence[Span], tagged: Mapping[int, tuple[str, str]] | None = None
) -> list[tuple[int, str, int]]:
    """(head entity, kind, tail entity) for each relation the text states between two neighbouring runs
    of mentions, in text order; ``text`` is what the spans' offsets point into. ``tagged``: the text's
    jieba words and tags by offset, as the caller already cut them (a gap is cut again only where its
    words do not line up with them)."""
    runs = _runs(text, spans)
    words = _Words(text, tagged or {})
    found: list[tuple[int, str, int]] = []
    for at, (first, second) in enumerate(zip(runs, runs[1:], strict=False)):
        if second.start - first.end > MAX_GAP_CHARS or first.entity == second.entity:
            continue
        gap = words.between(first.end, second.start)
        if at + 2 < len(runs) and (role := _role(gap, text[second.start : second.end])):
            third = runs[at + 2]  # X 的 [供应商] 是 Y: the role noun is a mention of its own
            if words.between(second.end, third.start) in ([("是", "v")], [("为", "p")]):
                found.append((first.entity, role, third.entity))
                continue
        stated = _chinese(gap, words.leading(second.end)) or _english(text[first.end : second.start])
        if stated:
            kind, reversed_ = stated
            found.append((second.entity, kind, first.entity) if reversed_ else (first.entity, kind, second.entity))
    return found


class _Words:
    """A text's jieba words for a stretch of it, without the free adverbs."""

    def __init__(self, text: str, tagged: Mapping[int, tuple[str, str]]):
        self.text, self.tagged = text, tagged

    def between(self, start: int, end: int) -> list[tuple[str, str]] | None:
        """The words of ``text[start:end]``; None when it holds a negation or is not all Han."""
        han = "".join(self.text[start:end].split())
        if not han:
            return []
        if not all(_is_han(char) for char in han):
            return None
        cut: list[tuple[str, str]] = []
        position = start
        while position < end:
            if self.text[position].isspace():
                position += 1
                continue
            tagged = self.tagged.get(position)
            if tagged is None or position + len(tagged[0]) > end:
                cut = part_of_speech(han)  # the caller's words do not line up with this stretch
                break
            cut.append(tagged)
            position += len(tagged[0])
        kept = []
        for word, tag in cut:
            if word in _NEGATIONS:
                return None
            if not (tag.startswith("d") or word in _FREE_WORDS):
                kept.append((word, tag))
        return kept

    def leading(self, start: int) -> list[tuple[str, str]]:
        """The words of the Han run right after ``start`` (spaces skipped)."""
        while start < len(self.text) and self.text[start].isspace():
            start += 1
        end = start
        while end < len(self.text) and _is_han(self.text[end]):
            end += 1
        return self.between(start, end) or []


def _is_han(char: str) -> bool:
    return "\u4e00" <= char <= "\u9fff"


def _runs(text: str, spans: Sequence[Span]) -> list[_Run]:
    """Mentions that overlap or touch (only spaces between them), merged, each run with its representative.
    A key phrase that overlaps another mention is left out (RAKE runs a name into the verb after it:
    "acme locks supplies"), and so is a mention of a pattern's verb."""
    spans = [span for span in spans if text[span.start : span.end] not in _VERBS]  # 供货 may be tagged a noun
    named = [span for span in spans if span.kind != "phrase"]
    kept = [
        span for span in spans
        if span.kind != "phrase" or not any(o.start < span.end and span.start < o.end for o in named)
    ]  # fmt: skip
    runs: list[tuple[int, int, list[Span]]] = []
    for span in sorted(kept, key=lambda span: (span.start, -span.end)):
        if runs and (span.start <= runs[-1][1] or not text[runs[-1][1] : span.start].strip()):
            start, end, members = runs[-1]
            runs[-1] = (start, max(end, span.end), [*members, span])
        else:
            runs.append((span.start, span.end, [span]))
    return [_Run(start, end, _representative(members).entity) for start, end, members in runs]


def _representative(members: list[Span]) -> Span:
    return min(reversed(members), key=lambda s: (_NAME_RANK.get(s.kind, len(_NAME_RANK)), -(s.end - s.start)))


def _role(gap: list[tuple[str, str]] | None, noun: str) -> str | None:
    """The kind a role noun after "的" names (供应商: supplied_by, 制造商: made_by), else None."""
    if gap not in ([("的", "uj")], [("之", "u")]):
        return None
    return SUPPLIED_BY if noun in _SUPPLIER_NOUNS else MADE_BY if noun in _MAKER_NOUNS else None


def _chinese(words: list[tuple[str, str]] | None, following: list[tuple[str, str]]) -> tuple[str, bool] | None:
    """(kind, reversed) of a Chinese statement "first <words> second <following>", or None."""
    if not words:
        return None
    heads = [word for word, _ in words]
    next_word = following[0][0] if following else ""
    if heads == ["由"]:  # X 由 Y 生产 / 供应
        if next_word in _MAKE_VERBS:
            return MADE_BY, False
        if next_word in _SUPPLY_VERBS:
            return SUPPLIED_BY, False
        return None
    if heads == ["为"] and next_word in _SUPPLY_VERBS:  # Y 为 X 供货
        return SUPPLIED_BY, True
    if heads == ["是"] and next_word in ("的", "之") and len(following) > 1:
        if following[1][0] in _PART_NOUNS:  # X 是 Y 的一部分
            return PART_OF, False
        return None
    if len(heads) == 3 and heads[0] in ("的", "之") and heads[2] in _IS:  # X 的供应商是 Y
        if heads[1] in _SUPPLIER_NOUNS:
            return SUPPLIED_BY, False
        if heads[1] in _MAKER_NOUNS:
            return MADE_BY, False
        return None
    if len(heads) != 1 and heads not in (["适用", "于"], ["隶属", "于"]):
        return None
    verb, tag = "".join(heads), words[0][1]
    if not tag.startswith(("v", "p")) and verb not in ("适用于", "隶属于"):
        return None  # the dictionary reads the word as no verb here
    if verb in _USE_VERBS:
        return USES, False
    if verb in ("适用于", "适用"):
        return APPLIES_TO, False
    if verb in ("属于", "隶属于"):
        return PART_OF, False
    if verb in _MAKE_VERBS:  # Y 生产 X
        return MADE_BY, True
    if verb in _SUPPLY_VERBS - {"提供", "供"}:  # Y 供应 X ("提供" states a service more often than a supply)
        return SUPPLIED_BY, True
    return None


def _english(gap: str) -> tuple[str, bool] | None:
    words = " ".join(gap.split()).lower()
    if not words or not words.isascii():
        return None
    for candidate in (words, _HEAD_NOUN.sub("", words, count=1)):
        for pattern, kind, reversed_ in _ENGLISH:
            if pattern.fullmatch(candidate):
                return kind, reversed_
    return None
