"""Spelling correction of Latin words against the vocabulary of the knowledge-base versions searched.

Correcting towards the searched content (not a general dictionary) only ever suggests words that can
match something, and leaves product names and jargon the KB uses alone.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict

from django.conf import settings
from django.db import connection
from symspellpy import SymSpell, Verbosity

from knowledge.models import Chunk, KnowledgeBaseVersion
from retrieval.expansion.base import ExpansionContext, QueryExpander, QueryVariant
from retrieval.expansion.common import LATIN_ALNUM

MAX_EDIT_DISTANCE = 2
# Dictionaries kept per process. A SymSpell dictionary costs roughly 3-4 kB per word (its deletes
# index), so 50,000 words are ~180 MB: the cache stays small and the vocabulary is capped.
CACHE_SIZE = 4

_LATIN_TOKEN = re.compile(f"[{LATIN_ALNUM}]+")
_CANDIDATE = re.compile("[A-Za-z]{4,}")  # shorter words, codes with digits and accented words are kept as typed

CacheKey = tuple[int, tuple[tuple[int, int], ...]]


def _vocabulary(tenant_id: int, version_ids: list[int]) -> list[tuple[str, int]]:
    """Lowercase Latin words of the versions' chunks, each with the number of chunks containing it.

    Computed in PostgreSQL so that only the distinct words, not the whole text, reach Python; the
    ``SPELLING_MAX_VOCABULARY`` most widespread words are kept, which bounds the dictionary's memory.
    """
    sql = f"""
        SELECT words.word, count(*)
        FROM {connection.ops.quote_name(Chunk._meta.db_table)} AS chunk
        CROSS JOIN LATERAL (
            SELECT DISTINCT (m.match)[1] AS word
            FROM regexp_matches(lower(chunk.content), '[a-z]{{3,}}', 'g') AS m(match)
        ) AS words
        WHERE chunk.tenant_id = %s AND chunk.kb_version_id = ANY(%s::bigint[])
        GROUP BY words.word
        ORDER BY count(*) DESC, words.word
        LIMIT %s
    """
    limit = settings.SPELLING_MAX_VOCABULARY
    with connection.cursor() as cursor:
        cursor.execute(sql, [tenant_id, version_ids, limit])
        rows: list[tuple[str, int]] = cursor.fetchall()
        return rows


class _DictionaryCache:
    """A small thread-safe LRU of SymSpell dictionaries keyed by tenant and version revisions.

    Keys include each version's ``revision``, so new content yields a new key; stale entries age out.
    A key is built by one thread at a time: concurrent searches after a change wait for that build
    instead of each scanning the KB's text.
    """

    def __init__(self, size: int):
        self._size = size
        self._lock = threading.Lock()
        self._entries: OrderedDict[CacheKey, SymSpell] = OrderedDict()
        self._building: dict[CacheKey, threading.Lock] = {}

    def get(self, tenant_id: int, version_ids: tuple[int, ...]) -> SymSpell:
        revisions = tuple(
            KnowledgeBaseVersion.objects.filter(pk__in=version_ids).order_by("pk").values_list("pk", "revision")
        )
        key = (tenant_id, revisions)
        with self._lock:
            if key in self._entries:
                return self._touch(key)
            build_lock = self._building.setdefault(key, threading.Lock())
        with build_lock:
            with self._lock:
                if key in self._entries:  # built while this thread waited
                    return self._touch(key)
            try:
                dictionary = self._build(tenant_id, [pk for pk, _ in revisions])
                with self._lock:
                    self._entries[key] = dictionary
                    while len(self._entries) > self._size:
                        self._entries.popitem(last=False)
            finally:
                with self._lock:
                    self._building.pop(key, None)
            return dictionary

    def _touch(self, key: CacheKey) -> SymSpell:
        self._entries.move_to_end(key)
        return self._entries[key]

    @staticmethod
    def _build(tenant_id: int, version_ids: list[int]) -> SymSpell:
        dictionary = SymSpell(max_dictionary_edit_distance=MAX_EDIT_DISTANCE)
        for word, count in _vocabulary(tenant_id, version_ids):
            dictionary.create_dictionary_entry(word, count)
        return dictionary

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def _with_casing_of(original: str, word: str) -> str:
    if original.isupper():
        return word.upper()
    return word.capitalize() if original[0].isupper() else word


class SpellingExpander(QueryExpander):
    name = "spelling"

    def __init__(self) -> None:
        self.dictionaries = _DictionaryCache(CACHE_SIZE)

    def expand(self, query: str, context: ExpansionContext) -> list[QueryVariant]:
        words = [match for match in _LATIN_TOKEN.finditer(query) if _CANDIDATE.fullmatch(match.group())]
        if not words or not context.version_ids or context.max_expansions < 1:
            return []
        dictionary = self.dictionaries.get(context.tenant_id, context.version_ids)
        parts, position = [], 0
        for match in words:
            correction = self._correct(dictionary, match.group().lower())
            if correction is not None:
                parts += [query[position : match.start()], _with_casing_of(match.group(), correction)]
                position = match.end()
        if not parts:
            return []
        text = "".join(parts) + query[position:]
        return [QueryVariant(text=text, weight=settings.SPELLING_WEIGHT, origin="spelling")]

    @staticmethod
    def _correct(dictionary: SymSpell, word: str) -> str | None:
        """The most frequent closest vocabulary word, or None for known words and words with no match.

        Four- and five-letter words allow one edit only: two edits turn short words into too many others.
        """
        if word in dictionary.words:
            return None
        distance = MAX_EDIT_DISTANCE if len(word) >= 6 else 1
        suggestions = dictionary.lookup(word, Verbosity.TOP, max_edit_distance=distance)
        return suggestions[0].term if suggestions else None
