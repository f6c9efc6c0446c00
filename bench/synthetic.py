"""The synthetic corpus of the scale benchmarks (``bench.vector_search``, ``bench.scale``,
``bench.hybrid_ab``, ``bench.filtered_scale``): rows whose vectors mix real SciFact passage vectors, so
100k-1M chunks load in minutes instead of the hours embedding them would take, and their exact top k.

Row ``g``'s vector is ``normalize(a + 0.35 b + 0.1 noise)`` of two random real passage vectors, its text
the passage of ``a`` plus a unique tag (the service dedups hits by content hash). Rows go in by the
production binary COPY (``knowledge.ingestion.chunk_rows.write_chunks``)."""

from __future__ import annotations

import numpy as np

DIM = 384
SLICE_ROWS = 100_000  # rows per COPY transaction (bounds the client's memory at 1M)
INDEX_NAME = "chunk_embedding_hnsw_384"
DOC_TYPES = ["txt", "md", "html", "pdf", "docx"]
SYNTHETIC_TAG = " [synthetic chunk "  # each row's text: its passage, this tag, its row number and "]"


def synthesize(real: np.ndarray, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(n x d float32 unit vectors, index of the main real component of each)."""
    d = real.shape[1]
    a = rng.integers(0, len(real), n)
    b = rng.integers(0, len(real), n)
    out = np.empty((n, d), dtype=np.float32)
    step = 10_000
    for start in range(0, n, step):
        stop = min(start + step, n)
        noise = rng.standard_normal((stop - start, d), dtype=np.float32) / np.float32(np.sqrt(d))
        v = real[a[start:stop]] + np.float32(0.35) * real[b[start:stop]] + np.float32(0.1) * noise
        out[start:stop] = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out, a


def load_synthetic_documents(
    kb, contents: list[str], vectors, main_component, n_docs: int, *, first_row: int = 0, metadata=None, labels=None
) -> None:
    """``n_docs`` documents sharing the rows equally, written with the production COPY in one
    transaction; row ``g`` holds the text of its main component plus a unique suffix (the service
    dedups fused hits by content hash) and ``metadata(g)``, by default ``{"shop_id": g % 20,
    "campaign_id": g % 200}``; document ``n`` the creation time and tags ``labels(n)`` gives, if given.
    ``first_row`` numbers rows and documents after an earlier call's (``vectors[i]`` is row
    ``first_row + i``), so a KB can grow in slices."""
    from django.db import transaction

    from knowledge.chunking import ChunkDraft
    from knowledge.ingestion.chunk_rows import ChunkBatch, write_chunks
    from knowledge.ingestion.files import Labels
    from knowledge.models import Document

    metadata = metadata or (lambda g: {"shop_id": g % 20, "campaign_id": g % 200})
    per_doc = len(vectors) // n_docs
    first_doc = first_row // per_doc
    docs = Document.objects.bulk_create(
        [
            Document(
                tenant=kb.tenant,
                knowledge_base=kb,
                source_uri=f"synthetic/{i:05d}.txt",
                title=f"synthetic document {i}",
                doc_type=DOC_TYPES[i % len(DOC_TYPES)],
                status=Document.Status.READY,
                chunk_count=per_doc,
            )
            for i in range(first_doc, first_doc + n_docs)
        ]
    )
    batches = []
    for d, doc in enumerate(docs):
        tags: list[str] = []
        if labels is not None:
            doc.created_at, tags = labels(first_doc + d)
        rows = range(d * per_doc, (d + 1) * per_doc)
        drafts = [
            ChunkDraft(
                text=(text := f"{contents[main_component[i]]}{SYNTHETIC_TAG}{first_row + i}]"),
                token_count=len(text) // 5,
                metadata=metadata(first_row + i),
            )
            for i in rows
        ]
        batches.append(ChunkBatch(doc, drafts, vectors[rows.start : rows.stop], Labels(tags=tags)))
    with transaction.atomic():
        if labels is not None:
            Document.objects.bulk_update(docs, ["created_at"])
        write_chunks(kb, kb.active_version, batches)


def exact_top_k(vectors: np.ndarray, queries: np.ndarray, k: int, mask: np.ndarray) -> list[np.ndarray]:
    """Row numbers of the k most cosine-similar rows per query among ``mask`` (unit vectors: dot product),
    best first; all of them when k or fewer match."""
    candidates = np.flatnonzero(mask)
    subset = vectors if len(candidates) == len(vectors) else vectors[candidates]  # no 1.5 GB copy at 1M
    out = []
    for start in range(0, len(queries), 32):
        scores = subset @ queries[start : start + 32].T  # rows x queries
        for column in scores.T:
            top = np.argpartition(-column, k)[:k] if len(column) > k else np.arange(len(column))
            out.append(candidates[top[np.argsort(-column[top])]])
    return out


def build_keyword_index(version) -> int:
    """The version's keyword index through the engine's own ``rebuild`` (one writer, one commit), as
    ``knowledge.lexical.rebuild_lexical_index`` builds it but with each distinct passage analyzed once:
    a synthetic row's text is one of 5,183 real passages plus a unique tag, and analysis is most of a
    rebuild (~330 us a row: about 6 minutes of CPU at 1M rows). A sample of rows is checked against the
    analysis of the whole text first."""
    from engines import get_lexical_index
    from engines.base import LexicalDocument
    from engines.lexical_filter import filter_fields
    from knowledge.chunking import contextual_text
    from knowledge.models import Chunk
    from knowledge.selectors.search import analyzer_for_tenant

    tenant_id = version.knowledge_base.tenant_id
    analyzer = analyzer_for_tenant(tenant_id)
    passages: dict[str, str] = {}

    def analyzed(context: str, section: str | None, content: str) -> str:
        passage, tag = content.rsplit(SYNTHETIC_TAG, 1)
        if context or section:  # not a row of load_synthetic_documents: no shortcut
            return analyzer.analyze(contextual_text(context, content, section))
        if passage not in passages:
            passages[passage] = analyzer.analyze(passage)
        return f"{passages[passage]} {analyzer.analyze(SYNTHETIC_TAG.lstrip() + tag)}"

    rows = Chunk.objects.filter(kb_version=version, tenant_id=tenant_id).values_list(
        "id", "document_id", "document__context", "metadata__section", "content", "doc_type", "created_at", "tags",
        "metadata", "acl",
    )  # fmt: skip
    for _, _, context, section, content, *_ in rows[:300]:
        if analyzed(context, section, content) != analyzer.analyze(contextual_text(context, content, section)):
            raise RuntimeError(f"analyzing passage and tag apart changes the tokens of {content[-40:]!r}")
    documents = (
        LexicalDocument(
            chunk_id, doc_id, tenant_id, analyzed(context, section, content),
            filter_fields(doc_type, created_at, tags, metadata, acl),
        )
        for chunk_id, doc_id, context, section, content, doc_type, created_at, tags, metadata, acl in rows.iterator(
            chunk_size=5000
        )
    )  # fmt: skip
    return get_lexical_index().build_version(
        version.pk, documents, analyzer_version=analyzer.version, dictionary_fingerprint=analyzer.dictionary_fingerprint
    )
