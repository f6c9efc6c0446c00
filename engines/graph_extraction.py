"""Entities and co-occurrence relations of a passage: deterministic, no model to download.

Chinese: names by jieba's dictionary tags and the rules of Chinese naming (``engines.han_names``: places
from a gazetteer, people, organisations, compound shop and maker names). Latin script gives identifiers
and codes (``PPR-9087``), capitalized multi-word names (``PortaLock Pro``, ``Department of Health``; not
"Do I", not a heading's, a sentence start's or a section label's capitals) and camel-case brands
(``AirSense``: ``engines.latin_names``); a query also gives a few RAKE-style key phrases. The tenant's
protected terms and the terms of its synonym groups are entities too. Every name is normalized as the analyzer normalizes
text and mapped through the aliases (synonym groups), so one entity per KB version stands for all its
spellings; the names in a large share of a version's passages (``common_names``) are dropped when its
graph is rebuilt.

Two entities are related when they occur near each other in a passage: a mention is related to the
mentions of the next ``RELATION_NEIGHBOURS`` other entities after it, within ``RELATION_WINDOW``
characters, each pair adding ``1 - distance / RELATION_WINDOW``. The neighbour bound keeps a Chinese
passage, which the window holds whole, from relating every pair of its entities. Where a sentence
states how two of them relate ("X 由 Y 生产", "X uses Y": ``engines.graph_relations``), the pair's
relation in that passage is typed and directed instead, its weight the co-occurrence's plus
``STATED_WEIGHT`` per statement; co-occurrence stays the fallback.

A curator's edits of a KB's graph (``Curation``: merged and renamed names, new labels, deleted
entities) are applied by the extraction itself, so they hold through every re-ingestion and rebuild.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from engines.analysis import (
    Analyzer,
    latin_compounds,
    normalize,
)
from engines.base import Entity, Extraction, Relations
from engines.graph_relations import Span, stated_relations
from engines.han_names import Tagged, han_names, tagged_words
from engines.latin_names import FUNCTION_WORDS, capitalized_names, codes
from engines.marked_names import marked_names

# What the extraction produces: a KB version's graph records it (``KnowledgeBaseVersion.graph_extractor``);
# the graph leg notes an older graph until ``manage.py rebuild_graph``. Bump it with any change of the entities.
# 2: dictionary tags instead of jieba's POS tagger, function words no part of a Latin name.
# 3: a mention is related to the next RELATION_NEIGHBOURS entities only (was: every one in the window).
# 5: typed, directed relations where a sentence states them (engines.graph_relations); 4 was tried and not
# shipped (docs/benchmarks/decisions.md, "Extractor 4 (not shipped)").
# 6: no passage key phrase; no Latin name from a heading, a sentence start or a section label, nor of words the
# passage writes in lower case; a code sheds a hyphenated modifier; synonym-group terms are entities; names in a
# large share of a version's passages are dropped on rebuild (``common_names``); a protected term of several words
# is named with its spaces.
# 7: Chinese names by dictionary tag only (a person with a surname, a transliteration in its characters), compound
# shop and maker names (粤海茶楼); a plain noun alone is no entity (extractor 6's "full variant", now with bridges).
# 8: places from a gazetteer (engines.gazetteer); no two-character person but a transliteration or a titled one, a
# transliteration's pieces joined (吉里 + 巴斯); a short organisation word starts with a name (engines.han_names);
# codes of three characters or more, no version or placeholder, a slash list split; Latin names of Latin letters,
# hyphenated words whole, ended by a code, a unit, a modifier or a section label; bilingual headings; camel-case
# brands.
# 9: Latin names in engines.latin_names: joined over "of", "for", "de", "von"... (National Center for Health
# Statistics); no sentence-start word before an acronym or a joiner ("Increased HCV", "Inhibition of EGFR");
# quantifiers are function words; abbreviations side by side are no name ("HCV RNA"); a code sheds "anti-", "non-"
# and "'s", and a residue ("Ser473") or a word and a number ("function1") is none. Chinese: a two-character
# transliteration the Xinhua dictionary defines is a word (沙丘), a verb-glued new word starts no compound
# (召入后宫), a place's centre is no organisation (温哥华市中心).
# 10: Latin names go on over a middle initial (Franklin D. Roosevelt); two codes joined by a hyphen are two codes
# (HMGB1-TLR4); a word run into a code is none of it (expressionSatb1); a word with a footnote (Kingdom.3) or a time
# (mid-1990s) is no code.
# 11: names the text marks (engines.marked_names): a surname and a title (张师傅), the agent of 由…掌勺 / 由…生产
# and what a chef cooks, a shop's signature dishes (招牌菜鱼香肉丝), names in 《》 and, read as names, in quotation
# marks or brackets; their kind wins over the dictionary's for the same words.
EXTRACTOR_VERSION = "11"

# A name in more than this share of a KB version's passages is no entity of it (a hub, not a bridge);
# below COMMON_MIN_PASSAGES passages a share is a handful of passages, what a bridge is, and none is common.
COMMON_SHARE = 0.1
COMMON_MIN_PASSAGES = 50
RELATION_WINDOW = 200  # characters: mentions farther apart in a passage are not related
RELATION_NEIGHBOURS = 4  # ... and a mention relates to the mentions of the next few other entities only
STATED_WEIGHT = 1.0  # what a statement of a typed relation adds to its pair's weight in the passage
MAX_ENTITIES_PER_PASSAGE = 24  # the most frequent; bounds the relations a passage adds (n^2)
KEY_PHRASES_PER_PASSAGE = 3
MAX_PHRASE_WORDS = 3
QUERY_NGRAM_WORDS = 3  # a query's candidate names are its word n-grams up to this length
FUZZY_MIN_CHARS = 5  # shorter names match exactly or not at all

_LATIN_WORD = re.compile(r"[^\W\d_]+")
_PHRASE_BREAK = re.compile(r"[^\w\s'-]|\d")
_WRITTEN_NAMES = frozenset({"name", "phrase"})  # the Latin entities a query writes like names
_LATIN_NAME = re.compile(r"[a-z\u00df-\u024f]+(?:[ '-][a-z\u00df-\u024f]+)*")  # normalized: lower case


@dataclass(frozen=True)
class Curation:
    """A curator's edits of one KB's graph, by normalized entity name: ``renamed`` maps a name to the
    name it now goes by (a merge into another entity, or a rename), ``labels`` gives a name the label
    it is shown with, ``deleted`` names no entity may have. Chains resolve (a merged into b, b renamed
    c: a is c); a name deleted after its renames is deleted."""

    renamed: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    deleted: frozenset[str] = frozenset()

    def resolve(self, name: str) -> str:
        seen = {name}
        while (next_name := self.renamed.get(name)) is not None and next_name not in seen:
            seen.add(next_name)
            name = next_name
        return name


@dataclass(frozen=True)
class _Mention:
    name: str
    label: str
    kind: str
    position: int
    marked: bool = False  # found by engines.marked_names only


class EntityExtractor:
    """Extraction with one tenant's analyzer (its protected terms) and aliases (alias -> canonical name,
    both normalized), and a KB's ``curation``."""

    def __init__(
        self,
        analyzer: Analyzer,
        aliases: Mapping[str, str] | None = None,
        curation: Curation | None = None,
        common: frozenset[str] = frozenset(),
    ):
        self.analyzer = analyzer
        self.curation = curation or Curation()
        self.common = common
        resolve = self.curation.resolve
        self.aliases = {alias: resolve(name) for alias, name in (aliases or {}).items()}
        self._synonyms = _term_pattern({*self.aliases, *self.aliases.values()})
        self.aliases.update((name, resolve(name)) for name in self.curation.renamed if name not in self.aliases)
        self._stopwords = analyzer.stopwords

    def extract(self, text: str, *, query: bool = False) -> Extraction:
        """The passage's entities and relations; a ``query``'s also include its RAKE key phrases (for
        the fuzzy match: a passage's are no entities). Names in ``common`` (in a large share of the KB
        version's passages) are dropped unless they are curated terms."""
        folded, tagged, mentions = self._mentions(text, query)
        if self.curation.deleted or self.common:
            dropped = self.curation.deleted
            mentions = [
                mention
                for mention in mentions
                if mention.name not in dropped and (mention.kind == "term" or mention.name not in self.common)
            ]
        counts = Counter(mention.name for mention in mentions)
        # the most frequent; among as frequent ones, a name other rules find before one only the text marks
        # (a passage listing works in 《》 keeps its places), then the first
        marked = {m.name for m in mentions if m.marked} - {m.name for m in mentions if not m.marked}
        kept = set(sorted(counts, key=lambda name: (-counts[name], name in marked))[:MAX_ENTITIES_PER_PASSAGE])
        first: dict[str, _Mention] = {}
        for mention in mentions:
            if mention.name in kept:
                first.setdefault(mention.name, mention)
        labels = self.curation.labels
        entities = tuple(Entity(name, labels.get(name, m.label), m.kind, counts[name]) for name, m in first.items())
        index = {name: position for position, name in enumerate(first)}
        kept_mentions = [m for m in mentions if m.name in index]
        spans = [Span(index[m.name], m.position, m.position + len(m.label), m.kind) for m in kept_mentions]
        stated = stated_relations(folded, spans, {offset: (word, tag) for offset, word, tag in tagged})
        return Extraction(entities, _relations([(index[m.name], m.position) for m in kept_mentions], stated))

    def query_names(self, text: str) -> list[str]:
        """Names an entity of the query may have: its extracted entities, then its word n-grams (Latin
        words joined by a space, Chinese words joined together), normalized and resolved through aliases."""
        names = dict.fromkeys(entity.name for entity in self.extract(text, query=True).entities)
        words = self._words(normalize(text))
        for size in range(1, QUERY_NGRAM_WORDS + 1):
            for start in range(len(words) - size + 1):
                gram = words[start : start + size]
                if all(word in self._stopwords or word in FUNCTION_WORDS for word, _ in gram):
                    continue  # "the", "how do i": no name
                separator = "" if all(han for _, han in gram) else " "
                names.setdefault(self._resolve(separator.join(word for word, _ in gram)))
        return list(names)

    def fuzzy_candidates(self, text: str, resolved: set[str]) -> list[str]:
        """The query's names worth a fuzzy match: those it writes like a name (a capitalized name, a
        key phrase; not every word n-gram: "patients" is a word, not a misspelt entity), of Latin
        letters only (codes and numbers must match exactly), ``FUZZY_MIN_CHARS`` or longer, not a
        stopword, and neither part of nor holding a name already ``resolved`` exactly."""
        return [
            name
            for name in (
                entity.name for entity in self.extract(text, query=True).entities if entity.kind in _WRITTEN_NAMES
            )
            if len(name) >= FUZZY_MIN_CHARS
            and _LATIN_NAME.fullmatch(name)
            and name not in self._stopwords
            and not any(name in known or known in name for known in resolved)
        ]

    def entity_name(self, label: str) -> str:
        """The entity name a label stands for: normalized and resolved through the aliases."""
        return self._resolve(normalize(unicodedata.normalize("NFKC", label)).strip())

    def _resolve(self, name: str) -> str:
        return self.aliases.get(name, name)

    def _mentions(self, text: str, query: bool) -> tuple[str, list[tuple[int, str, str]], list[_Mention]]:
        """The normalized text, its Han words (offset, word, tag) and its mentions in text order."""
        text = unicodedata.normalize("NFKC", text)
        folded = normalize(text)
        tagged = tagged_words(folded)
        mentions = [*self._protected(folded), *self._synonym_terms(folded), *self._han(tagged), *self._codes(text)]
        mentions += self._marked(folded, tagged)
        mentions += self._names(text, query)
        if query:
            mentions += self._key_phrases(folded)
        # a protected code is also a compound, a protected dish also a jieba word: one mention each
        unique = {(mention.name, mention.position): mention for mention in reversed(mentions)}
        return folded, tagged, sorted(unique.values(), key=lambda mention: mention.position)

    def _mention(self, label: str, kind: str, position: int) -> _Mention:
        return _Mention(self._resolve(normalize(label)), label, kind, position)

    def _protected(self, folded: str) -> list[_Mention]:
        found, position = [], 0
        for token in self.analyzer.protected_terms(folded):
            term = token.replace("_", " ")  # the analyzer's token of a term of several words
            at = folded.find(term, position)  # terms come in text order; the next is found after this one
            found.append(_Mention(self._resolve(term), term, "term", max(at, position)))
            position = max(at + len(term), position)
        return found

    def _synonym_terms(self, folded: str) -> list[_Mention]:
        """The terms of the tenant's synonym groups: each an entity, named by its group's first term."""
        if self._synonyms is None:
            return []
        return [
            _Mention(self._resolve(m.group()), m.group(), "term", m.start()) for m in self._synonyms.finditer(folded)
        ]

    def _han(self, tagged: Tagged) -> list[_Mention]:
        return [
            _Mention(self._resolve(name), name, kind, offset)  # folded: normalized already
            for offset, name, kind in han_names(tagged)
            if name not in self._stopwords
        ]

    def _marked(self, folded: str, tagged: Tagged) -> list[_Mention]:
        """Names the text marks (engines.marked_names); where the dictionary's rules name the same words,
        theirs is the kind kept."""
        return [
            _Mention(self._resolve(name), name, kind, offset, marked=True)  # folded: normalized already
            for offset, name, kind in marked_names(folded, tagged)
            if name not in self._stopwords
        ]

    def _codes(self, text: str) -> list[_Mention]:
        return [self._mention(code, "code", position) for position, code in codes(text)]

    def _names(self, text: str, query: bool = False) -> list[_Mention]:
        names = capitalized_names(text, self._is_function_word, query)
        return [self._mention(label, "name", position) for position, label in names]

    def _is_function_word(self, word: str) -> bool:
        folded = word.lower()
        return folded in FUNCTION_WORDS or folded in self._stopwords

    def _key_phrases(self, folded: str) -> list[_Mention]:
        """RAKE: phrases are runs of words that are no function word or stopword; a phrase scores the
        sum of its words' degree / frequency; the best few phrases of two or more words are kept, with
        every occurrence."""
        phrases: list[tuple[str, int]] = []
        for piece in _PHRASE_BREAK.split(folded):
            if not piece.isascii():
                continue
            run: list[re.Match[str]] = []
            for match in [*_LATIN_WORD.finditer(piece), None]:
                kept = None if match is None or self._is_function_word(match.group()) else match
                if kept is None or len(run) == MAX_PHRASE_WORDS:
                    if len(run) >= 2:
                        phrases.append((" ".join(m.group() for m in run), folded.find(piece) + run[0].start()))
                    run = [] if kept is None else [kept]
                else:
                    run.append(kept)
        frequency: Counter[str] = Counter()
        degree: Counter[str] = Counter()
        for phrase, _ in phrases:
            words = phrase.split()
            frequency.update(words)
            for word in words:
                degree[word] += len(words)
        score = {phrase: sum(degree[w] / frequency[w] for w in phrase.split()) for phrase, _ in phrases}
        best = set(sorted(score, key=lambda phrase: (-score[phrase], phrase))[:KEY_PHRASES_PER_PASSAGE])
        return [  # folded: normalized already
            _Mention(self._resolve(phrase), phrase, "phrase", position)
            for phrase, position in phrases
            if phrase in best
        ]

    def _words(self, folded: str) -> list[tuple[str, bool]]:
        """(word, is_han) in text order: jieba's words for Han runs, the analyzer's compounds elsewhere."""
        words: list[tuple[int, str, bool]] = [
            (match.start(), match.group(), False) for match in latin_compounds(folded)
        ]
        words += [(offset, word, True) for offset, word, _ in tagged_words(folded)]
        return [(word, han) for _, word, han in sorted(words)]


def common_names(document_frequency: Mapping[str, int], passages: int) -> frozenset[str]:
    """The names of a KB version in more than ``COMMON_SHARE`` of its ``passages`` (``document_frequency``:
    name -> passages naming it), none below ``COMMON_MIN_PASSAGES`` passages."""
    if passages < COMMON_MIN_PASSAGES:
        return frozenset()
    return frozenset(name for name, count in document_frequency.items() if count > COMMON_SHARE * passages)


def _term_pattern(terms: set[str]) -> re.Pattern[str] | None:
    """One pattern finding any of these normalized terms, the longest first; a term's Latin ends must
    not go on in a letter or digit ("pro" is not found in "product")."""
    if not terms:
        return None
    parts = []
    for term in sorted(terms, key=lambda term: (-len(term), term)):
        before = r"(?<![^\W_])" if term[:1].isascii() and term[:1].isalnum() else ""
        after = r"(?![^\W_])" if term[-1:].isascii() and term[-1:].isalnum() else ""
        parts.append(before + re.escape(term) + after)
    return re.compile("|".join(parts))


def _relations(mentions: list[tuple[int, int]], stated: list[tuple[int, str, int]]) -> Relations:
    """The relations of a passage's mentions, given as (entity index, position) in text order: a pair a
    sentence ``stated`` (head, kind, tail) relates is typed and directed, the other pairs co-occur (the
    lower index first). Entity indices, not names, and columns, not an object per relation."""
    weights: dict[tuple[int, int], float] = {}
    for at, (left, position) in enumerate(mentions):
        neighbours: set[int] = set()
        for right, there in mentions[at + 1 :]:
            distance = there - position
            if distance >= RELATION_WINDOW:
                break
            if right == left:
                continue
            if right not in neighbours:
                if len(neighbours) == RELATION_NEIGHBOURS:
                    break
                neighbours.add(right)
            pair = (left, right) if left < right else (right, left)
            weights[pair] = weights.get(pair, 0.0) + (1 - distance / RELATION_WINDOW)
    typed: dict[tuple[int, int, str], float] = {}
    for head, kind, tail in stated:
        pair = (head, tail) if head < tail else (tail, head)
        typed[head, tail, kind] = typed.get((head, tail, kind), 0.0) + weights.pop(pair, 0.0) + STATED_WEIGHT
    rows = [(source, target, weight, "") for (source, target), weight in weights.items()]
    rows += [(head, tail, weight, kind) for (head, tail, kind), weight in typed.items()]
    return Relations(
        tuple(row[0] for row in rows), tuple(row[1] for row in rows), tuple(round(row[2], 4) for row in rows),
        tuple(row[3] for row in rows) if typed else (),
    )  # fmt: skip
