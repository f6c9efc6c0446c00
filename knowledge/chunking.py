"""Token-sized chunks with overlap, split at the largest natural boundary that fits.

Sizes are counted by the embedding model's own tokenizer, so a chunk never exceeds what the model
reads (MiniLM reads 256 positions and sees about one token per Chinese character). Boundaries are
tried in order: paragraphs, lines, sentence ends (CJK 。！？； and their ASCII forms, which NFKC
cleaning produces from the full-width ones), clauses, words, characters.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from langchain_text_splitters import RecursiveCharacterTextSplitter

from knowledge.parsing import Section

SEPARATORS = ["\n\n", "\n", "。", "！", "？", "；", "!", "?", ";", ". ", "，", ",", "、", " ", ""]
# A passage this short is a heading or a stray line: it answers nothing on its own.
SHORT_PASSAGE_TOKENS = 32
# Bumped whenever chunk boundaries or what the indexes read of a chunk change, so re-ingesting an
# unchanged file re-chunks it (3: the document's title is embedded and indexed with every chunk; 4:
# Markdown and HTML are cut at their headings, and each chunk is read with its heading path too; 5: PDF
# and DOCX tables are Markdown tables cut by whole rows under their header, DOCX is cut at its headings,
# PDF pages with no text layer are read by OCR, and a CSV with no question/answer columns is a table).
CHUNKER_VERSION = "5"
# Document types whose chunks the versions since did not change, with the version that last did:
# re-ingesting them after a bump that is not theirs re-embeds nothing.
UNCHANGED_SINCE = {"txt": "3", "faq": "3", "md": "4", "html": "4"}


# Parent-child chunking's defaults (docs/benchmarks/decisions.md, "Parent-child chunks"): children small
# enough that one matches one point, parents a section or a few paragraphs.
DEFAULT_CHILD_TOKENS = 128
DEFAULT_PARENT_TOKENS = 512


@dataclass
class ChunkDraft:
    text: str
    token_count: int
    metadata: dict[str, Any] = field(default_factory=dict)
    parent: int | None = None  # parent_child: the index of its parent passage in its document's parents

    @property
    def content_hash(self) -> str:
        return content_hash(self.text)


def content_hash(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def document_context(title: str, path: Path) -> str:
    """The context every chunk of a document is embedded and indexed with: its title, unless the title
    is only the file's name (the parser's fallback), which in a corpus of ids would be noise."""
    return "" if title == path.stem else title.strip()


def chunker_version(doc_type: str) -> str:
    """The chunker version that cut a document of this type (stored on it; another means re-chunk it)."""
    return UNCHANGED_SINCE.get(doc_type, CHUNKER_VERSION)


def chunk_context(document_context: str, section: str | None) -> str:
    """What a chunk is read with: its document's context, then the heading path to it (``Section``)."""
    return "\n\n".join(part for part in (document_context, section) if part)


def contextual_text(context: str, text: str, section: str | None = None) -> str:
    """What the embedder and the lexical index read for a chunk: the document's context and the heading
    path to the chunk, then the chunk. Both are stored once (on the document, in the chunk's metadata),
    never in the chunk's ``content``."""
    context = chunk_context(context, section)
    return f"{context}\n\n{text}" if context else text


def chunk_sections(
    sections: Iterable[Section],
    *,
    count_tokens: Callable[[str], int],
    chunk_size: int,
    chunk_overlap: int,
    max_tokens: int | None = None,
) -> list[ChunkDraft]:
    """Split each section on its own (a page, an FAQ pair), dropping exact duplicate chunks.

    A passage under ``SHORT_PASSAGE_TOKENS`` (typically a title the splitter left alone because the
    text after it did not fit beside it) joins the passage after it, which may then exceed
    ``chunk_size`` by that much but never ``max_tokens`` (the model's limit)."""
    # The splitter measures every piece twice and each separator once per merge: remember lengths.
    count_tokens = functools.lru_cache(maxsize=4096)(count_tokens)
    splitter = RecursiveCharacterTextSplitter(
        separators=SEPARATORS,
        keep_separator="end",
        chunk_size=chunk_size,
        chunk_overlap=min(chunk_overlap, chunk_size // 2),
        length_function=count_tokens,
        strip_whitespace=True,
    )
    drafts: list[ChunkDraft] = []
    seen: set[str] = set()
    limit = chunk_size + SHORT_PASSAGE_TOKENS
    if max_tokens is not None:
        limit = min(limit, max_tokens)
    for section in sections:
        if section.rows:
            pieces = _row_chunks(section, splitter, count_tokens, chunk_size)
        else:
            spans = _spans(section.text, splitter.split_text(section.text))
            pieces = [
                (text, _with_locator(section, start, end))
                for text, start, end in _join_short_passages(spans, count_tokens, limit)
            ]
        for text, metadata in pieces:
            digest = content_hash(text)
            if not text or digest in seen:
                continue
            seen.add(digest)
            drafts.append(ChunkDraft(text=text, token_count=count_tokens(text), metadata=metadata))
    return drafts


def _row_chunks(
    section: Section, splitter: RecursiveCharacterTextSplitter, count_tokens: Callable[[str], int], size: int
) -> list[tuple[str, dict[str, Any]]]:
    """A rows-section (``Section.rows``) packed into chunks of whole rows, without overlap, each led by
    the section's header, with the first and last row it holds (``metadata["rows"]``). Only a row
    longer than a chunk on its own is cut, by the splitter, each piece without the header. A chunk's
    character offsets span its rows (the header stands once, before the section's text)."""
    header = section.header
    room = size - (count_tokens(header) + 1 if header else 0)
    chunks: list[tuple[str, dict[str, Any]]] = []
    lines: list[str] = []
    numbers: list[int] = []
    starts: list[int] = []  # where each of ``lines`` starts in the section's text
    used = 0

    def located(first: int, last: int) -> Section:
        return replace(section, metadata={**section.metadata, "rows": [first, last]})

    def emit() -> None:
        if lines:
            text = "\n".join([header, *lines] if header else lines)
            end = starts[-1] + len(lines[-1])
            chunks.append((text, _with_locator(located(numbers[0], numbers[-1]), starts[0], end)))
            lines.clear()
            numbers.clear()
            starts.clear()

    start = 0
    for line, number in zip(section.text.split("\n"), section.rows, strict=True):
        line_start, start = start, start + len(line) + 1
        tokens = count_tokens(line) + 1  # its line break
        if tokens > room:
            emit()
            used = 0
            for piece, begin, end in _spans(line, splitter.split_text(line)):
                chunks.append((piece, _with_locator(located(number, number), line_start + begin, line_start + end)))
            continue
        if used + tokens > room:
            emit()
            used = 0
        lines.append(line)
        numbers.append(number)
        starts.append(line_start)
        used += tokens
    emit()
    return chunks


def chunk_parents_and_children(
    sections: Iterable[Section],
    *,
    count_tokens: Callable[[str], int],
    child_size: int,
    child_overlap: int,
    parent_size: int,
    max_tokens: int | None = None,
) -> tuple[list[ChunkDraft], list[ChunkDraft]]:
    """Parent passages of at most ``parent_size`` tokens (cut as plain chunks are, without overlap, so
    they cover the text once), then each parent cut into children of ``child_size`` tokens with
    overlap; each child names its parent (``ChunkDraft.parent``). A child text seen in an earlier
    parent is dropped, as plain chunking drops duplicates."""
    count_tokens = functools.lru_cache(maxsize=4096)(count_tokens)
    parents = chunk_sections(
        sections, count_tokens=count_tokens, chunk_size=parent_size, chunk_overlap=0, max_tokens=parent_size
    )
    children: list[ChunkDraft] = []
    seen: set[str] = set()
    for index, parent in enumerate(parents):
        for child in chunk_sections(
            [Section(parent.text, parent.metadata, offset=parent.metadata["locator"]["chars"][0])],
            count_tokens=count_tokens,
            chunk_size=child_size,
            chunk_overlap=child_overlap,
            max_tokens=max_tokens,
        ):
            if child.content_hash not in seen:
                seen.add(child.content_hash)
                child.parent = index
                children.append(child)
    return parents, children


def _spans(text: str, pieces: list[str]) -> list[tuple[str, int, int]]:
    """Each piece the splitter cut from ``text`` with where it lies in it: pieces come in order and may
    overlap, so each is looked for from just after the previous one's start."""
    spans = []
    cursor = 0
    for piece in pieces:
        start = text.find(piece, cursor)
        if start < 0:  # never for the splitter's own pieces; kept whole rather than wrong
            start = max(text.find(piece), 0)
        spans.append((piece, start, start + len(piece)))
        cursor = start + 1
    return spans


_LOCATED_KEYS = ("section", "sheet", "rows", "slide", "table", "caption")


def _with_locator(section: Section, start: int, end: int) -> dict[str, Any]:
    """The section's metadata and the chunk's locator: where a citation points (its page range, heading
    path, sheet and rows or slide, table, and character offsets in the document's extracted text)."""
    metadata = dict(section.metadata)
    locator: dict[str, Any] = {key: metadata[key] for key in _LOCATED_KEYS if key in metadata}
    if "page" in metadata:
        locator["pages"] = [metadata["page"], metadata["page"]]
    locator["chars"] = [section.offset + start, section.offset + end]
    metadata["locator"] = locator
    return metadata


def _join_short_passages(
    spans: list[tuple[str, int, int]], count_tokens: Callable[[str], int], limit: int
) -> list[tuple[str, int, int]]:
    """Each short passage joins the one after it (dropped if that one already starts with it, as
    overlap); a short passage that cannot join (too long together, or last) stays as it is. A joined
    passage spans from the short one's start to the next one's end."""
    joined: list[tuple[str, int, int]] = []
    pending: tuple[str, int, int] | None = None
    for text, start, end in spans:
        if pending is not None:
            if not text.startswith(pending[0]):
                merged = f"{pending[0]}\n\n{text}"
                if count_tokens(merged) <= limit:
                    text, start = merged, pending[1]
                else:
                    joined.append(pending)
            pending = None
        if count_tokens(text) < SHORT_PASSAGE_TOKENS:
            pending = (text, start, end)
        else:
            joined.append((text, start, end))
    if pending is not None:
        joined.append(pending)
    return joined
