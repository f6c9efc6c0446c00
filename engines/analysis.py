"""The one text analyzer behind every lexical backend, at index time and at query time.

tantivy and Elasticsearch both receive ``analyze(text)`` (tokens joined by spaces) through a
whitespace tokenizer, so they rank alike and a query matches exactly what was indexed. Pipeline:

1. NFKC (folds full-width ``ＰＰＲ－９０８７``), casefold, Traditional -> Simplified Chinese (OpenCC
   ``t2s``): Traditional text hurts both retrieval legs, so both sides are folded to Simplified.
2. Protected terms of the tenant dictionary (literal terms and regex patterns) are cut out first and
   emitted whole as one token each, never also as parts, unstemmed (like Lucene's keyword marker).
   Because they never reach jieba, jieba needs no user dictionary and one instance serves all tenants.
3. Han runs go to jieba. Runs of other letters and digits (Latin with diacritics, and also Greek,
   Cyrillic, kana, Hangul, which are kept rather than dropped) never do: jieba on English is slow.
   A compound such as ``sky-10023908`` yields itself and its parts, so ``PPR-9087`` and ``PPR 9087``
   both match; a plain word is dropped if it is a stopword, else Snowball-stemmed.
4. Punctuation, symbols, whitespace and emoji are dropped.

Any change to the tokens this produces must bump ``ANALYZER_VERSION``: indexes store the version.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache, wraps
from typing import TypeVar

import jieba
import jieba.posseg
import opencc
import Stemmer

logger = logging.getLogger(__name__)

ANALYZER_VERSION = "1"

LUCENE_ENGLISH_STOPWORDS: frozenset[str] = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with".split()
)

TERM = "term"
PATTERN = "pattern"
ANALYZER_CACHE_SIZE = 256  # analyzers (one per distinct tenant dictionary) kept per process
WORD_CACHE_SIZE = 100_000  # distinct words whose tokens are kept, per stopword set
# Han runs whose jieba words are kept: graph extraction cuts what analysis just cut. Ingestion extracts a group
# of passages while the next one is analyzed, so the cache holds a few groups' runs (about 10 MiB when full).
HAN_RUN_CACHE_SIZE = 16_384
CJK_SHARE = 0.3  # share of CJK ideographs from which a text counts as Chinese

# CJK ideographs: Extension A, the URO, compatibility ideographs, and planes 2-3 (Extensions B-H), which
# OpenCC's t2s output does use (e.g. U+2B688)
_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003ffff"
_WORD_CHAR = rf"[^\W_{_HAN}]"  # a letter or digit of any script but Han
_SEPARATOR = r"[-_./']"
_WORDS = re.compile(rf"{_WORD_CHAR}+(?:{_SEPARATOR}{_WORD_CHAR}+)*")  # a word, or a compound like v2.3.1
_ASCII_WORDS = re.compile(rf"[a-z0-9]+(?:{_SEPARATOR}[a-z0-9]+)*")  # the same on casefolded ASCII, 1.5x faster
_SEPARATORS = re.compile(_SEPARATOR)
_HAN_CHAR = re.compile(f"[{_HAN}]")
_HAN_RUNS = re.compile(f"([{_HAN}]+)")
# The runs of raw text the analyzer tokenizes apart (a Han run, or a word or compound such as sky-10023908):
# a caller maps tokens back onto text through them (highlighting).
TEXT_RUNS = re.compile(f"[{_HAN}]+|{_WORDS.pattern}")
# A protected match never starts or ends between two letters/digits: `ppr-9087` is not found inside
# `xppr-90871`. For terms the start is checked after consuming the first character, so the candidate
# regex begins with a character class and the regex engine can skip ahead to possible starts.
_NOT_INSIDE_WORD_AFTER_FIRST = rf"(?<!{_WORD_CHAR}{_WORD_CHAR})"
_NOT_INSIDE_WORD = rf"(?:(?<!{_WORD_CHAR})|(?!{_WORD_CHAR}))"


@dataclass(frozen=True)
class DictionaryEntry:
    """A protected term as ``knowledge.models.DictionaryTerm`` stores it: kind "term" or "pattern"."""

    kind: str
    value: str


T = TypeVar("T")


def _once(factory: Callable[[], T]) -> Callable[[], T]:
    """Build an expensive shared object lazily, exactly once, even when threads race for it."""
    lock = threading.Lock()
    built: list[T] = []

    @wraps(factory)
    def get() -> T:
        if not built:
            with lock:
                if not built:
                    built.append(factory())
        return built[0]

    get.loaded = lambda: bool(built)  # type: ignore[attr-defined]  # for warm-up checks: asking does not build
    return get


@_once
def _segmenter() -> jieba.Tokenizer:
    """A private jieba instance: add_word/load_userdict on the global one cannot change our tokens."""
    jieba.setLogLevel(logging.WARNING)
    tokenizer = jieba.Tokenizer()
    tokenizer.initialize()
    return tokenizer


@_once
def _dictionary_tags() -> dict[str, str]:
    """jieba's dictionary part-of-speech tag of each of its words (graph extraction reads them): read from
    the default dictionary, the segmenter's (a tokenizer that is never initialized only names the file)."""
    tags: dict[str, str] = jieba.posseg.POSTokenizer(jieba.Tokenizer()).word_tag_tab
    return tags


@_once
def _t2s() -> opencc.OpenCC:
    """Shared converter; safe across threads: the binding holds the GIL and Convert() is const."""
    return opencc.OpenCC("t2s")


_STEMMER = Stemmer.Stemmer("english", 0)  # no internal cache: _Words caches whole results
_STEMMER_LOCK = threading.Lock()  # PyStemmer documents its instances as not thread-safe


def _stem(word: str) -> str:
    with _STEMMER_LOCK:
        stem: str = _STEMMER.stemWord(word)
    return stem


def _normalize(text: str) -> tuple[str, bool]:
    """NFKC, casefold, typographic apostrophe -> ASCII, Traditional -> Simplified; and whether Han is present."""
    text = unicodedata.normalize("NFKC", text)
    if text.isascii():
        return text.lower(), False  # the same as casefold() on ASCII, and faster
    text = text.casefold().replace("\u2019", "'")
    if _HAN_CHAR.search(text):
        return _t2s().convert(text), True
    return text, False


def normalize(text: str) -> str:
    """Text as the analyzer compares it (NFKC, casefold, Traditional -> Simplified), still untokenized."""
    return _normalize(text)[0]


def han_runs(text: str) -> Iterator[re.Match[str]]:
    """The runs of Han characters in ``text``, in order."""
    return _HAN_RUNS.finditer(text)


def latin_compounds(text: str) -> Iterator[re.Match[str]]:
    """Words and compounds (``PPR-9087-BAT``, ``v2.3``) outside Han runs, as the analyzer cuts them."""
    return _WORDS.finditer(text)


OUT_OF_DICTIONARY = "oov"  # the tag of a word jieba's HMM found that its dictionary does not hold


def part_of_speech(han_text: str) -> list[tuple[str, str]]:
    """(word, tag) for a Han text: the analyzer's own segmentation, each word tagged from jieba's
    dictionary (``nr`` person, ``ns`` place, ``nt`` organisation, ``n`` noun...; ``OUT_OF_DICTIONARY``
    for the HMM's new words). jieba's POS tagger (``jieba.posseg``) gives nearly the same tags but runs a
    part-of-speech HMM over every run of unknown characters, several times the segmentation's cost."""
    tags = _dictionary_tags()
    return [(word, tags.get(word, OUT_OF_DICTIONARY)) for word in _han_words(han_text)]


@lru_cache(maxsize=HAN_RUN_CACHE_SIZE)
def _han_words(han_run: str) -> tuple[str, ...]:
    """jieba's words of a Han run. Cached for the most recent runs: ingestion analyzes a document's
    passages for the keyword index, then extracts their entities from the same runs (cutting was half
    of the extraction's time on CMRC 2018)."""
    return tuple(_segmenter().lcut(han_run, HMM=True))


def dictionary_frequency(word: str) -> int:
    """How often jieba's dictionary counts ``word`` (0 when it does not hold it)."""
    return _segmenter().FREQ.get(word, 0) or 0


def dictionary_tag(word: str) -> str:
    """jieba's dictionary part-of-speech tag of ``word``, or ``OUT_OF_DICTIONARY``."""
    return _dictionary_tags().get(word, OUT_OF_DICTIONARY)


def _is_word_char(char: str) -> bool:
    return char.isalnum() and _HAN_CHAR.match(char) is None  # the same set as _WORD_CHAR


def _inside_word(text: str, position: int) -> bool:
    return 0 < position < len(text) and _is_word_char(text[position - 1]) and _is_word_char(text[position])


def _strip_possessive(run: str) -> str:
    return run[:-2] if run.endswith("'s") else run


class _Words:
    """Analyzed text of each distinct non-Han word or compound, cached per stopword set.

    A run's analyzed text is its tokens, each followed by a space ("" for a stopword). Word
    frequencies are Zipfian: after a few documents nearly every run is a hit, and the whole lookup
    (set difference, map, join) runs in C. A full cache starts over rather than tracking recency; it
    is replaced, never cleared, so a concurrent reader keeps a complete dict.
    """

    def __init__(self, stopwords: frozenset[str]):
        self._stopwords = stopwords
        self._entries: dict[str, str] = {}

    def analyze(self, runs: list[str]) -> str:
        entries = self._entries
        distinct = set(runs)
        missing = distinct.difference(entries)
        if missing:
            if len(entries) + len(missing) > WORD_CACHE_SIZE:
                entries, missing = {}, distinct
            entries.update({run: self._analyze(run) for run in missing})
            self._entries = entries
        return "".join(map(entries.__getitem__, runs))

    def _analyze(self, run: str) -> str:
        run = _strip_possessive(run)
        if run.isalnum():
            return self._word(run)
        return run + " " + "".join(map(self._word, _SEPARATORS.split(run)))  # whole compound, then its parts

    def _word(self, word: str) -> str:
        if word in self._stopwords:
            return ""
        return (word if word.isdigit() else _stem(word)) + " "


_word_caches: dict[frozenset[str], _Words] = {}
_word_caches_lock = threading.Lock()


def _words_for(stopwords: frozenset[str]) -> _Words:
    """One cache per stopword set, shared by all tenants' analyzers (their dictionaries do not matter)."""
    with _word_caches_lock:
        return _word_caches.setdefault(stopwords, _Words(stopwords))


class _Protector:
    """Finds protected terms and patterns: the leftmost match wins, then the longest term, then a pattern.

    Literal terms are looked up in a set at candidate positions (a character that starts some term)
    rather than compiled into one alternation, which would try every term at every position and,
    with thousands of terms, take seconds to compile.
    """

    def __init__(self, terms: set[str], patterns: list[str]):
        self._terms = frozenset(terms)
        lengths: dict[str, set[int]] = {}
        for term in terms:
            lengths.setdefault(term[0], set()).add(len(term))
        self._lengths = {first: sorted(sizes, reverse=True) for first, sizes in lengths.items()}
        candidates = []
        if terms:
            # The regex engine tests the non-BMP members of a class one by one: one range for them
            # all keeps the test O(1); _term_end weeds out the rare false candidates.
            first_chars = "".join(re.escape(char) for char in sorted(lengths) if char <= "\uffff")
            if any(char > "\uffff" for char in lengths):
                first_chars += "\U00010000-\U0010ffff"
            candidates.append(f"[{first_chars}]{_NOT_INSIDE_WORD_AFTER_FIRST}")
        self._patterns = None
        if patterns:
            self._patterns = re.compile(f"{_NOT_INSIDE_WORD}(?:{'|'.join(patterns)}){_NOT_INSIDE_WORD}")
            candidates.extend(patterns)  # without the edge checks, which cost 2x at every position
        self._candidates = re.compile("|".join(candidates))

    def spans(self, text: str) -> Iterator[tuple[int, int]]:
        position = 0
        while position < len(text) and (match := self._candidates.search(text, position)):
            start = match.start()
            end = self._term_end(text, start) or self._pattern_end(text, start)
            if end:
                yield start, end
                position = end
            else:
                position = start + 1

    def _term_end(self, text: str, start: int) -> int:
        lengths = self._lengths.get(text[start : start + 1])  # an empty pattern match may sit at the end
        if not lengths or _inside_word(text, start):  # the candidate may have come from a pattern
            return 0
        for length in lengths:
            end = start + length
            if text[start:end] in self._terms and not _inside_word(text, end):
                return end
        return 0

    def _pattern_end(self, text: str, start: int) -> int:
        match = self._patterns.match(text, start) if self._patterns else None
        return match.end() if match and match.end() > start else 0  # an empty match protects nothing


def _protector(entries: Iterable[DictionaryEntry]) -> _Protector | None:
    """Normalize the dictionary like text. An invalid or empty-matching pattern is logged and skipped,
    so one bad row cannot break a tenant's indexing and search."""
    terms: set[str] = set()
    patterns: set[str] = set()
    for entry in entries:
        if entry.kind == TERM:
            term = " ".join(_normalize(entry.value)[0].split())
            if term:
                terms.add(term)
        elif entry.kind == PATTERN:
            pattern = unicodedata.normalize("NFKC", entry.value.strip())
            if not pattern:
                continue
            if _HAN_CHAR.search(pattern):
                pattern = _t2s().convert(pattern)
            wrapped = f"(?i:{pattern})"  # runs on casefolded text: an uppercase ORD- must still match
            try:
                matches_nothing = re.fullmatch(wrapped, "") is not None
            except re.error as exc:
                logger.warning("skipping invalid dictionary pattern %r: %s", entry.value, exc)
                continue
            if matches_nothing:  # it would "protect" an empty string at every position
                logger.warning("skipping dictionary pattern %r: it matches the empty string", entry.value)
                continue
            patterns.add(wrapped)
        else:
            raise ValueError(f"unknown dictionary entry kind {entry.kind!r} (expected {TERM!r} or {PATTERN!r})")
    return _Protector(terms, sorted(patterns)) if terms or patterns else None


def _fingerprint(entries: Iterable[DictionaryEntry]) -> str:
    pairs = sorted({(entry.kind, entry.value) for entry in entries})
    return hashlib.sha256(json.dumps(pairs, ensure_ascii=False).encode()).hexdigest()[:12] if pairs else ""


class Analyzer:
    """Tokens for BM25: the same for documents and queries, given the same dictionary and stopwords.

    Stopwords are dropped from Latin and Chinese words alike (the default set only has English ones).
    """

    def __init__(
        self, dictionary: Iterable[DictionaryEntry] = (), *, stopwords: frozenset[str] = LUCENE_ENGLISH_STOPWORDS
    ):
        entries = tuple(dictionary)
        self._stopwords = frozenset(filter(None, (_normalize(word)[0].strip() for word in stopwords)))
        self._words = _words_for(self._stopwords)
        self._protector = _protector(entries)
        self._dictionary_fingerprint = _fingerprint(entries)
        stopwords_hash = hashlib.sha256("\n".join(sorted(self._stopwords)).encode()).hexdigest()[:8]
        self._version = f"{ANALYZER_VERSION}-{stopwords_hash}"

    @property
    def version(self) -> str:
        """Stored with each lexical index: a mismatch means the index must be rebuilt."""
        return self._version

    @property
    def stopwords(self) -> frozenset[str]:
        """Normalized words dropped from tokens."""
        return self._stopwords

    @property
    def dictionary_fingerprint(self) -> str:
        """Stable short hash of the dictionary ("" when empty): a change also means a rebuild."""
        return self._dictionary_fingerprint

    def tokens(self, text: str) -> list[str]:
        """Index/query tokens in text order, duplicates kept (BM25 needs term frequencies).

        No token is empty or contains whitespace: a protected term such as ``wi-fi 6`` becomes
        ``wi-fi_6``.
        """
        return self.analyze(text).split()

    def analyze(self, text: str) -> str:
        """What backends index and query: the tokens joined by single spaces.

        Built as text, not as a list of tokens, because that is what indexing needs and it is faster.
        """
        text, has_han = _normalize(text)
        pieces = []
        for segment, protected in self._segments(text):
            if protected:
                pieces.append(segment + " ")
            else:
                self._scan(segment, has_han, pieces)
        return "".join(pieces)[:-1]  # every piece ends with a space

    def protected_terms(self, text: str) -> list[str]:
        """The tenant's protected terms found in ``text``, normalized, each as its token."""
        return [segment for segment, protected in self._segments(_normalize(text)[0]) if protected]

    def _segments(self, text: str) -> Iterator[tuple[str, bool]]:
        """Split normalized text into (segment, is_protected); a protected segment is its own token."""
        if self._protector is None:
            yield text, False
            return
        text = " ".join(text.split())  # so that a term's single space matches any run of whitespace
        position = 0
        for start, end in self._protector.spans(text):
            if start > position:
                yield text[position:start], False
            yield text[start:end].replace(" ", "_"), True  # backends split on whitespace
            position = end
        if position < len(text):
            yield text[position:], False

    def _scan(self, text: str, has_han: bool, pieces: list[str]) -> None:
        """Append the analyzed pieces of unprotected text: jieba for Han runs, regex and stemmer for the rest."""
        if not has_han:
            pieces.append(self._words.analyze((_ASCII_WORDS if text.isascii() else _WORDS).findall(text)))
        else:
            for index, part in enumerate(_HAN_RUNS.split(text)):  # odd indexes hold the Han runs
                if index % 2:
                    pieces.extend(word + " " for word in _han_words(part) if word not in self._stopwords)
                elif runs := _WORDS.findall(part):
                    pieces.append(self._words.analyze(runs))


_analyzers: OrderedDict[tuple[str, frozenset[str]], Analyzer] = OrderedDict()
_analyzers_lock = threading.Lock()


def analyzer_for(dictionary: Iterable[DictionaryEntry]) -> Analyzer:
    """The analyzer for one tenant's dictionary and the configured stopwords, built once per process.

    An LRU keyed by dictionary fingerprint and stopwords. Two threads missing the same key may both
    build it; the results are identical, so that is harmless.
    """
    entries = tuple(dictionary)
    stopwords = default_stopwords()
    key = (_fingerprint(entries), stopwords)
    with _analyzers_lock:
        if key in _analyzers:
            _analyzers.move_to_end(key)
            return _analyzers[key]
    analyzer = Analyzer(entries, stopwords=stopwords)
    with _analyzers_lock:
        analyzer = _analyzers.setdefault(key, analyzer)
        _analyzers.move_to_end(key)
        while len(_analyzers) > ANALYZER_CACHE_SIZE:
            _analyzers.popitem(last=False)
    return analyzer


def default_stopwords() -> frozenset[str]:
    """Lucene's English set, or ``settings.ANALYZER_STOPWORDS`` if non-empty, plus ``ANALYZER_EXTRA_STOPWORDS``."""
    from django.conf import settings

    base = settings.ANALYZER_STOPWORDS or LUCENE_ENGLISH_STOPWORDS
    return frozenset(base) | frozenset(settings.ANALYZER_EXTRA_STOPWORDS)


def is_cjk_query(text: str) -> bool:
    """True when at least 30 % of the non-space characters (after NFKC) are CJK ideographs."""
    text = unicodedata.normalize("NFKC", text)
    visible = len("".join(text.split()))
    return visible > 0 and len(_HAN_CHAR.findall(text)) / visible >= CJK_SHARE


def detect_language(text: str) -> str:
    """ "zh" or "en" only: all that language-aware fusion weights need to know about a query."""
    return "zh" if is_cjk_query(text) else "en"
