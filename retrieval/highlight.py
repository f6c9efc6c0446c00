"""Matched terms in a passage, found with the analyzer that indexed it: a highlight shows what BM25
matched (a product code such as ``sky-10023908`` whole, Chinese word by word as jieba cut it), not a
guess from string search."""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

from engines.analysis import TEXT_RUNS, Analyzer, is_cjk_query


@dataclass(frozen=True)
class Term:
    """A span of the raw text and the tokens the analyzer makes of it."""

    start: int
    end: int
    tokens: frozenset[str]

    def surface(self, text: str) -> str:
        return text[self.start : self.end]


def terms(analyzer: Analyzer, text: str) -> list[Term]:
    """The spans of ``text`` that yield tokens: a word or compound whole, a Han run word by word. A
    Chinese word folded by the analyzer (Traditional to Simplified) has no span in the raw text and is
    left out."""
    found = []
    for run in TEXT_RUNS.finditer(text):
        tokens = analyzer.tokens(run.group())
        if not tokens:
            continue
        if not is_cjk_query(run.group()):
            found.append(Term(run.start(), run.end(), frozenset(tokens)))
            continue
        cursor = run.start()
        for token in tokens:
            position = text.find(token, cursor, run.end())
            if position >= 0:
                found.append(Term(position, position + len(token), frozenset([token])))
                cursor = position + len(token)
    return found


def highlight(analyzer: Analyzer, text: str, query_tokens: set[str]) -> SafeString:
    """``text`` escaped, with every span sharing a token with the query inside ``<mark>``."""
    pieces, position = [], 0
    for term in terms(analyzer, text):
        if term.tokens & query_tokens:
            pieces += [escape(text[position : term.start]), format_html("<mark>{}</mark>", term.surface(text))]
            position = term.end
    pieces.append(escape(text[position:]))
    return mark_safe("".join(pieces))
