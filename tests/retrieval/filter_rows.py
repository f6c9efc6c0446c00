"""The rows the filter tests select from (tests/retrieval/test_filters*.py, fixture ``filter_rows``).

Every case states its expectation as a Python predicate over the rows' *specifications* (the values
the fixture wrote), so the expected id sets are computed independently of the SQL the compiler makes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from knowledge.models import Chunk
from retrieval.filters import compile_filters
from tests.factories import ChunkFactory, DocumentFactory, KnowledgeBaseFactory

UTC = dt.UTC
MISSING = object()


def at(*args) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


@dataclass
class Row:
    name: str
    doc: str  # key of the document (its doc_type is the same string)
    created_at: dt.datetime
    tags: list[str]
    metadata: dict = field(default_factory=dict)

    @property
    def doc_type(self) -> str:
        return self.doc

    def meta(self, path: str) -> Any:
        """The metadata value at a dotted path, or MISSING."""
        value: Any = self.metadata
        for segment in path.split("."):
            if not isinstance(value, dict) or segment not in value:
                return MISSING
            value = value[segment]
        return value


# --- independent JSON semantics ------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def json_eq(stored: Any, wanted: Any) -> bool:
    """JSON equality: true is not 1, "7" is not 7, 1 equals 1.0."""
    if stored is MISSING:
        return False
    if wanted is None:
        return stored is None
    if isinstance(wanted, bool):
        return isinstance(stored, bool) and stored is wanted
    if _is_number(wanted):
        return _is_number(stored) and stored == wanted
    return isinstance(stored, str) and stored == wanted


def json_cmp(stored: Any, op: str, wanted: Any) -> bool:
    """Range comparison between JSON values of the same type only."""
    same_type = (_is_number(stored) and _is_number(wanted)) or (isinstance(stored, str) and isinstance(wanted, str))
    if not same_type:
        return False
    return {"gt": stored > wanted, "gte": stored >= wanted, "lt": stored < wanted, "lte": stored <= wanted}[op]


def m_eq(path, value):
    return lambda r: json_eq(r.meta(path), value)


def m_cmp(path, op, value):
    return lambda r: json_cmp(r.meta(path), op, value)


def m_any(path, values):
    return lambda r: any(json_eq(r.meta(path), v) for v in values)


def m_text(path, test):
    """A string match: only string values are matched (numbers, lists and missing keys are not)."""
    return lambda r: isinstance(r.meta(path), str) and test(r.meta(path))


def m_exists(path):
    return lambda r: r.meta(path) is not MISSING


def _case_id(case) -> str:
    return repr(case.values[0] if hasattr(case, "values") else case[0])


# --- the rows ------------------------------------------------------------------------------------

DOC_TYPES = ("pdf", "docx", "txt", "md")

ROWS = [
    Row(
        "r0",
        "pdf",
        at(2025, 12, 31, 23, 59, 59),
        ["policy", "faq"],
        {"shop_id": 7, "lang": "zh", "price": 5, "name": "apple", "a": {"b": 1}, "contains": "yes"},
    ),
    Row(
        "r1",
        "pdf",
        at(2026, 1, 1, 0, 0, 0),
        ["policy"],
        {"shop_id": 8, "lang": "en", "price": 10.5, "name": "banana", "flag": True, "a": {"b": 2}, "in": 3},
    ),
    Row(
        "r2",
        "docx",
        at(2026, 1, 1, 12, 0, 0),
        ["faq"],
        {"shop_id": "7", "price": 0, "name": "cherry", "flag": False, "a": {"b": "x"}, "exact": None},
    ),
    Row(
        "r3",
        "docx",
        at(2026, 1, 2, 0, 0, 0),
        [],
        {"shop_id": None, "price": -3, "name": "date", "a": 5, "contains": "no", "code": "10"},
    ),
    Row(
        "r4",
        "txt",
        at(2026, 2, 15, 8, 30, 0),
        ["faq", "howto", "policy"],
        {"lang": "zh", "price": 100, "name": "elder", "a": {"c": 1}, "in": 4, "code": "9"},
    ),
    Row(
        "r5",
        "txt",
        at(2025, 6, 1, 0, 0, 0),
        ["howto"],
        {"shop_id": 7, "flag": True, "a": {"b": {"c": "deep"}}, "exact": 1, "code": "100"},
    ),
    Row("r6", "md", at(2026, 1, 1, 0, 0, 0), ["release-notes"], {}),
    Row("r8", "md", at(2026, 4, 1, 0, 0, 0), [], {"name": "50%_grape", "labels": ["red", "blue"]}),
    Row(
        "r7",
        "md",
        at(2027, 3, 3, 3, 3, 3),
        ["faq", "howto"],
        {"shop_id": 9, "lang": "fr", "price": 5.0, "name": "fig", "flag": False, "isnull": True, "gt": 2},
    ),
]


@dataclass
class Dataset:
    ids: dict[str, int]
    docs: dict[str, Any]
    base: Any  # queryset of this fixture's chunks only

    def select(self, filters: Any) -> set[int]:
        return set(compile_filters(filters).apply(self.base).values_list("id", flat=True))

    def expect(self, predicate: Callable[[Row], bool]) -> set[int]:
        return {self.ids[row.name] for row in ROWS if predicate(row)}

    def doc_id(self, row: Row) -> int:
        return self.docs[row.doc].pk


def build_dataset() -> Dataset:
    """The rows of ``ROWS`` in one KB, and a row of another KB and tenant that no filter may select."""
    # Every KB first: creating one runs CREATE INDEX, refused once chunk inserts have pending FK triggers.
    kb, other_kb = KnowledgeBaseFactory(), KnowledgeBaseFactory()
    docs = {doc_type: DocumentFactory(knowledge_base=kb, doc_type=doc_type) for doc_type in DOC_TYPES}
    chunks = [
        ChunkFactory.build(
            document=docs[row.doc],
            doc_type=row.doc_type,
            created_at=row.created_at,
            tags=row.tags,
            metadata=row.metadata,
        )
        for row in ROWS
    ]
    Chunk.objects.bulk_create(chunks)
    # Noise outside the queried scope (another KB and tenant) that matches many filters: never counted.
    other = ChunkFactory(
        document__knowledge_base=other_kb,
        doc_type="pdf",
        tags=["faq"],
        metadata={"shop_id": 7},
        created_at=at(2026, 1, 1),
    )
    assert other.kb_version_id != kb.active_version_id
    base = Chunk.objects.filter(kb_version=kb.active_version)
    return Dataset(ids={row.name: chunk.pk for row, chunk in zip(ROWS, chunks)}, docs=docs, base=base)


def assert_selects(data: Dataset, filters: Any, predicate: Callable[[Row], bool], *, allow_empty: bool = False):
    expected = data.expect(predicate)
    everything = data.expect(lambda r: True)
    # Each case must discriminate: it selects some rows and leaves others out.
    assert expected != everything, "test case does not discriminate"
    if not allow_empty:
        assert expected, "test case selects nothing"
    assert data.select(filters) == expected
