"""Tenant-curated synonym expansion: each matching rule rewrites one term of the query."""

from __future__ import annotations

import re

from knowledge.models import Synonym
from retrieval.expansion.base import ExpansionContext, QueryExpander, QueryVariant
from retrieval.expansion.common import LATIN_ALNUM, top_variants

_LATIN_EDGE = re.compile(f"[{LATIN_ALNUM}]")
Span = tuple[int, int]


def term_pattern(term: str) -> re.Pattern[str]:
    """Case-insensitive pattern for ``term``; a Latin edge must not touch another Latin character.

    CJK has no word separators, so a CJK edge matches as a plain substring.
    """
    start = f"(?<![{LATIN_ALNUM}])" if _LATIN_EDGE.match(term[0]) else ""
    end = f"(?![{LATIN_ALNUM}])" if _LATIN_EDGE.match(term[-1]) else ""
    return re.compile(start + re.escape(term) + end, re.IGNORECASE)


def _rewrites(kind: str, terms: tuple[str, ...], replacements: tuple[str, ...]) -> list[tuple[str, list[str]]]:
    """(term to find, its substitutes): a two-way group maps each member to the others, a rule one way.

    Terms are searched longest first, so that a member found inside a longer member ("手机" in
    "智能手机") is not rewritten on its own; substitutes keep the order the rule gives them.
    """
    members = list(dict.fromkeys(term.strip() for term in terms if term.strip()))
    longest_first = sorted(members, key=len, reverse=True)
    if kind == Synonym.Kind.EQUIVALENT:
        return [(term, [other for other in members if other.casefold() != term.casefold()]) for term in longest_first]
    targets = [term.strip() for term in replacements if term.strip()]
    return [(term, targets) for term in longest_first]


def _substitute(query: str, spans: list[Span], new: str) -> str:
    parts, position = [], 0
    for start, end in spans:
        parts += [query[position:start], new]
        position = end
    return "".join(parts) + query[position:]


class SynonymExpander(QueryExpander):
    name = "synonyms"

    def expand(self, query: str, context: ExpansionContext) -> list[QueryVariant]:
        variants: list[QueryVariant] = []
        for rule in context.synonyms:
            covered: list[Span] = []  # occurrences of this rule's longer terms
            for term, substitutes in _rewrites(rule.kind, rule.terms, rule.replacements):
                spans = [
                    match.span()
                    for match in term_pattern(term).finditer(query)
                    if not any(start <= match.start() and match.end() <= end for start, end in covered)
                ]
                covered += spans
                if spans:
                    variants += [
                        QueryVariant(_substitute(query, spans, new), rule.weight, "synonym") for new in substitutes
                    ]
        return top_variants(query, variants, context.max_expansions)
