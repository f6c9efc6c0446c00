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


# Words of a question that BM25 keeps (Lucene's English stopwords are fewer) but that neither say what it is
# about nor are worth curating: question words, pronouns, auxiliaries.
FUNCTION_WORDS = frozenset(
    """how what which where who whom whose when why i me my mine we us our you your he him his she her its
    do does did done can could should would shall may might must have has had am been being get got
    """.split()
)


def is_trivial(surface: str) -> bool:
    """A term no one curates or needs marked: a function word, one Latin letter, a number of 1-2 digits."""
    word = surface.casefold()
    return word in FUNCTION_WORDS or (len(word) == 1 and word.isascii()) or (word.isdigit() and len(word) <= 2)


def meaningful_terms(analyzer: Analyzer, text: str) -> list[Term]:
    """``terms`` without the trivial ones (``is_trivial``): what a query is about."""
    return [term for term in terms(analyzer, text) if not is_trivial(term.surface(text))]


def highlight(analyzer: Analyzer, text: str, query_tokens: set[str]) -> SafeString:
    """``text`` escaped, with every span sharing a token with the query inside ``<mark>``."""
    pieces, position = [], 0
    for term in terms(analyzer, text):
        if term.tokens & query_tokens:
            pieces += [escape(text[position : term.start]), format_html("<mark>{}</mark>", term.surface(text))]
            position = term.end
    pieces.append(escape(text[position:]))
    return mark_safe("".join(pieces))
