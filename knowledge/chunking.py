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
from dataclasses import dataclass, field

from langchain_text_splitters import RecursiveCharacterTextSplitter

from knowledge.parsing import Section

SEPARATORS = ["\n\n", "\n", "。", "！", "？", "；", "!", "?", ";", ". ", "，", ",", "、", " ", ""]


@dataclass
class ChunkDraft:
    text: str
    token_count: int
    metadata: dict = field(default_factory=dict)

    @property
    def content_hash(self) -> str:
        return content_hash(self.text)


def content_hash(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def chunk_sections(
    sections: Iterable[Section], *, count_tokens: Callable[[str], int], chunk_size: int, chunk_overlap: int
) -> list[ChunkDraft]:
    """Split each section on its own (a page, an FAQ pair), dropping exact duplicate chunks."""
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
    for section in sections:
        for text in splitter.split_text(section.text):
            digest = content_hash(text)
            if not text or digest in seen:
                continue
            seen.add(digest)
            drafts.append(ChunkDraft(text=text, token_count=count_tokens(text), metadata=dict(section.metadata)))
    return drafts
