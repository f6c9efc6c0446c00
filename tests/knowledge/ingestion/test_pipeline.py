"""The Ingester (knowledge.ingestion.pipeline): parse, chunk, embed, write, index (its graph stage:
test_pipeline_graph.py)."""

import json
import threading

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from knowledge import chunking
from knowledge.chunking import SHORT_PASSAGE_TOKENS
from knowledge.ingestion import pipeline
from knowledge.knowledge_bases import create_knowledge_base
from knowledge.lexical import rebuild_lexical_index
from knowledge.models import Chunk, Document
from knowledge.stores import vector_index
from retrieval.services.search import search
from retrieval.types import SearchRequest
from tests.factories import TenantFactory
from tests.knowledge.formats import write_pptx
from tests.knowledge.helpers import chunk_texts, ingest

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def test_sample_kb_round_trips_every_format(sample_kb):
    documents = Document.objects.filter(knowledge_base=sample_kb)
    assert not documents.exclude(status=Document.Status.READY).exists()
    formats = set(documents.values_list("doc_type", flat=True))
    assert formats == {"txt", "md", "html", "pdf", "docx", "faq"}
    for document in documents:
        assert document.chunk_count == document.chunks.count() > 0
        # A title joins the passage after it, up to SHORT_PASSAGE_TOKENS over the chunk size.
        assert all(chunk.token_count < sample_kb.chunk_size + SHORT_PASSAGE_TOKENS for chunk in document.chunks.all())
    # One distinctive phrase per format made it into a chunk of the right document.
    expectations = {
        "products/ppr-9087-installation-manual.pdf": "PPR-9087",
        "policies/membership-points.docx": "积分",
        "partners/sichuan-kitchen-menu.txt": "鱼香肉丝",
        "partners/restaurant-food-safety.md": "本店配备饮食禁忌防御机制",
        "troubleshooting/error-codes.html": "E-221",
        "faq/product-faq-zh.csv": "SKY-10023908",
        "faq/shipping-faq-en.jsonl": "?",
    }
    for suffix, phrase in expectations.items():
        document = documents.get(source_uri=f"sample_kb/{suffix}")
        assert any(phrase in text for text in chunk_texts(document)), suffix


def test_sidecar_labels_reach_every_chunk(sample_kb):
    document = Document.objects.get(knowledge_base=sample_kb, source_uri="sample_kb/troubleshooting/order-status.md")
    assert document.metadata["order_id"] == "ORD-2026-000817"
    for chunk in document.chunks.all():
        assert chunk.tags == document.tags
        assert chunk.metadata["shop_id"] == document.metadata["shop_id"]
        assert chunk.kb_version_id == sample_kb.active_version_id
        assert chunk.tenant_id == sample_kb.tenant_id


def test_faq_rows_become_separate_chunks_with_their_question(sample_kb):
    document = Document.objects.get(knowledge_base=sample_kb, source_uri="sample_kb/faq/product-faq-en.csv")
    chunks = list(document.chunks.order_by("ordinal"))
    assert len(chunks) >= 8
    for chunk in chunks:
        assert chunk.content.startswith(chunk.metadata["question"])


def test_reingesting_unchanged_files_does_nothing(kb, tmp_path):
    (tmp_path / "a.txt").write_text("The SKY-20031 bulb resets after three power cycles.")
    (tmp_path / "b.md").write_text("# Returns\n\nReturns are accepted within 30 days.")
    first = ingest(kb, tmp_path)
    chunk_ids = set(Chunk.objects.filter(knowledge_base=kb).values_list("id", flat=True))
    second = ingest(kb, tmp_path)
    assert (first.added, first.chunks) == (2, 2)
    assert (second.added, second.unchanged, second.replaced, second.chunks) == (0, 2, 0, 0)
    assert set(Chunk.objects.filter(knowledge_base=kb).values_list("id", flat=True)) == chunk_ids


def test_a_new_chunker_version_rechunks_unchanged_files_of_the_types_it_changes(kb, tmp_path, monkeypatch):
    write_pptx(tmp_path / "a.pptx")
    (tmp_path / "b.txt").write_text("The SKY-20032 bulb resets after two power cycles.")
    ingest(kb, tmp_path)
    assert ingest(kb, tmp_path).unchanged == 2
    monkeypatch.setattr(chunking, "CHUNKER_VERSION", "next")
    report = ingest(kb, tmp_path)
    assert (report.unchanged, report.replaced) == (1, 1)
    versions = dict(Document.objects.filter(knowledge_base=kb).values_list("doc_type", "chunker_version"))
    assert versions == {"pptx": "next", "txt": chunking.UNCHANGED_SINCE["txt"]}
    assert ingest(kb, tmp_path).unchanged == 2


def test_changed_file_replaces_its_chunks(kb, tmp_path):
    path = tmp_path / "policy.txt"
    path.write_text("Old rule: refunds take 14 days.")
    ingest(kb, tmp_path)
    path.write_text("New rule: refunds take 3 days.\n\nExpress refunds take one day.")
    report = ingest(kb, tmp_path)
    document = Document.objects.get(knowledge_base=kb)
    assert report.replaced == 1
    assert "Old rule" not in " ".join(chunk_texts(document))
    assert "New rule: refunds take 3 days." in chunk_texts(document)[0]
    assert document.chunk_count == document.chunks.count()


def test_sidecar_change_alone_relabels_the_document(kb, tmp_path):
    (tmp_path / "a.txt").write_text("Shop opening hours are 9 to 18.")
    (tmp_path / "a.txt.meta.json").write_text('{"tags": ["hours"], "metadata": {"shop_id": 1}}')
    ingest(kb, tmp_path)
    (tmp_path / "a.txt.meta.json").write_text('{"tags": ["hours"], "metadata": {"shop_id": 2}}')
    report = ingest(kb, tmp_path)
    assert report.replaced == 1
    assert list(Chunk.objects.filter(knowledge_base=kb).values_list("metadata__shop_id", flat=True)) == [2]


def test_a_failed_write_leaves_the_previous_chunks(kb, tmp_path, monkeypatch):
    path = tmp_path / "guide.txt"
    path.write_text("Version one of the guide.")
    ingest(kb, tmp_path)
    before = chunk_texts(Document.objects.get(knowledge_base=kb))

    index = vector_index()
    real_write = index.write

    def write_then_crash(*args, **kwargs):
        real_write(*args, **kwargs)  # rows are written inside the document's transaction...
        raise RuntimeError("disk full")  # ...which then fails before it commits

    monkeypatch.setattr(index, "write", write_then_crash)
    path.write_text("Version two of the guide, much longer than before.")
    with pytest.raises(RuntimeError):
        ingest(kb, tmp_path)
    document = Document.objects.get(knowledge_base=kb)
    assert chunk_texts(document) == before
    assert document.status == Document.Status.READY


def test_unparseable_file_fails_alone_with_a_reason(kb, tmp_path):
    (tmp_path / "good.txt").write_text("A perfectly fine document about PPR-9087.")
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.7 this is not really a pdf")
    (tmp_path / "empty.md").write_text("   \n")
    report = ingest(kb, tmp_path)
    assert (report.added, report.failed) == (1, 2)
    failed = {doc.source_uri.split("/")[-1]: doc for doc in Document.objects.filter(status=Document.Status.FAILED)}
    assert set(failed) == {"broken.pdf", "empty.md"}
    assert "PDF" in failed["broken.pdf"].error
    assert "no text" in failed["empty.md"].error
    assert not Chunk.objects.filter(document__in=failed.values()).exists()


def test_a_new_version_that_fails_keeps_the_old_one_searchable(kb, tmp_path):
    path = tmp_path / "faq.jsonl"
    path.write_text('{"question": "Where is my order?", "answer": "Check the app."}\n')
    ingest(kb, tmp_path)
    path.write_text('{"question": "broken json"\n')
    report = ingest(kb, tmp_path)
    document = Document.objects.get(knowledge_base=kb)
    assert report.failed == 1
    assert document.status == Document.Status.FAILED
    assert "stays searchable" in document.error
    assert chunk_texts(document) == ["Where is my order?\nCheck the app."]


def test_a_group_embeds_in_the_background_while_the_next_is_read_and_each_chunk_keeps_its_vector(
    kb, tmp_path, embedder, monkeypatch
):
    monkeypatch.setattr(pipeline, "EMBED_FLUSH_CHUNKS", 2)
    topics = ["smart lock batteries", "door hinge screws", "window sensor pairing", "garage remote codes", "hub reset"]
    for i, topic in enumerate(topics):
        (tmp_path / f"doc{i}.txt").write_text(f"Document {i} explains {topic}.")
    events: list[tuple[str, str]] = []
    real_parse, real_rows, real_embed = pipeline.parse_file, pipeline.chunk_rows, embedder.embed_documents

    def parse(path):
        events.append(("parse", path.name))
        return real_parse(path)

    def rows(kb, version, batches):
        events.append(("write", ",".join(batch.document.source_uri.rsplit("/", 1)[-1] for batch in batches)))
        return real_rows(kb, version, batches)

    def embed(texts):
        events.append(("embed in " + threading.current_thread().name.split("_")[0], str(len(texts))))
        return real_embed(texts)

    monkeypatch.setattr(pipeline, "parse_file", parse)
    monkeypatch.setattr(pipeline, "chunk_rows", rows)
    monkeypatch.setattr(embedder, "embed_documents", embed)
    report = ingest(kb, tmp_path)

    assert (report.added, report.chunks, report.failed) == (5, 5, 0)
    assert {name for name, _ in events if name.startswith("embed")} == {"embed in ingest-embed"}
    writes = [documents for name, documents in events if name == "write"]
    assert writes == ["doc0.txt,doc1.txt", "doc2.txt,doc3.txt", "doc4.txt"]  # in the order they were read
    # the first group is written only after the second one was read (and handed to the embedding thread)
    assert events.index(("parse", "doc3.txt")) < events.index(("write", writes[0]))
    for chunk in Chunk.objects.filter(knowledge_base=kb):
        expected = real_embed([chunk.content])[0]
        assert float(np.dot(np.asarray(chunk.embedding, dtype=float), expected)) > 0.999


def test_groups_grow_from_a_small_first_one_so_the_model_starts_early(kb, tmp_path, embedder, monkeypatch):
    monkeypatch.setattr(pipeline, "EMBED_FIRST_FLUSH_CHUNKS", 1)
    monkeypatch.setattr(pipeline, "EMBED_FLUSH_CHUNKS", 4)
    for i in range(10):
        (tmp_path / f"doc{i}.txt").write_text(f"Document {i} is about the PPR-{9000 + i} smart lock.")
    sizes: list[int] = []
    real_embed = embedder.embed_documents

    def embed(texts):
        sizes.append(len(texts))
        return real_embed(texts)

    monkeypatch.setattr(embedder, "embed_documents", embed)
    report = ingest(kb, tmp_path)
    assert (report.added, report.chunks, report.failed) == (10, 10, 0)
    assert sizes == [1, 2, 4, 3]  # doubling up to EMBED_FLUSH_CHUNKS; the rest in a last group
    assert sorted(Chunk.objects.filter(knowledge_base=kb).values_list("content", flat=True)) == sorted(
        (tmp_path / f"doc{i}.txt").read_text() for i in range(10)
    )


def test_a_group_the_embedder_fails_fails_only_its_own_documents(
    tenant, tmp_path, remote_model, embedding_server, monkeypatch
):
    monkeypatch.setattr(pipeline, "EMBED_FLUSH_CHUNKS", 1)
    kb = create_knowledge_base(tenant=tenant, name="remote", embedding_model="remote:minilm")
    texts = {"a.txt": "Returns are accepted within 30 days.", "b.txt": "Shipping takes two days.",
             "c.txt": "Gift cards never expire."}  # fmt: skip
    for name, text in texts.items():
        (tmp_path / name).write_text(text)
    embedding_server.failing_inputs = {texts["b.txt"]}
    report = ingest(kb, tmp_path)

    assert (report.added, report.failed, report.chunks) == (2, 1, 2)
    documents = {doc.source_uri.rsplit("/", 1)[-1]: doc for doc in Document.objects.filter(knowledge_base=kb)}
    assert documents["b.txt"].status == Document.Status.FAILED and "embedding failed" in documents["b.txt"].error
    for name in ("a.txt", "c.txt"):
        assert documents[name].status == Document.Status.READY
        assert chunk_texts(documents[name]) == [texts[name]]
    assert not documents["b.txt"].chunks.exists()


def test_chunks_are_written_with_copy_not_row_inserts(kb, tmp_path, django_assert_max_num_queries):
    for i in range(5):
        (tmp_path / f"doc{i}.txt").write_text("\n\n".join(f"Paragraph {j} of document {i}." * 8 for j in range(6)))
    with django_assert_max_num_queries(60) as captured:
        report = ingest(kb, tmp_path)
    assert report.chunks > 10
    inserts = [q["sql"] for q in captured.captured_queries if q["sql"].startswith('INSERT INTO "knowledge_chunk"')]
    assert inserts == []


def test_a_flush_costs_the_same_queries_for_two_documents_or_twelve(kb, tmp_path):
    """The documents of one flush group share their statements: no round trips per document."""

    def queries_to_ingest(count: int, folder) -> int:
        folder.mkdir()
        for i in range(count):
            (folder / f"doc{i}.txt").write_text(f"Document {i} is about the PPR-{9000 + i} smart lock.")
        with CaptureQueriesContext(connection) as captured:
            report = ingest(kb, folder)
        assert (report.added, report.chunks) == (count, count)
        return len(captured.captured_queries)

    queries_to_ingest(1, tmp_path / "warm-up")
    assert queries_to_ingest(12, tmp_path / "many") == queries_to_ingest(2, tmp_path / "few")


def test_reingesting_keeps_the_first_ingestion_time(kb, tmp_path):
    path = tmp_path / "policy.txt"
    path.write_text("Old rule: refunds take 14 days.")
    ingest(kb, tmp_path)
    first = Document.objects.get(knowledge_base=kb)
    path.write_text("New rule: refunds take 3 days.")
    ingest(kb, tmp_path)
    document = Document.objects.get(knowledge_base=kb)
    assert document.pk == first.pk
    assert document.created_at == first.created_at < document.updated_at
    assert set(document.chunks.values_list("created_at", flat=True)) == {first.created_at}


def test_ingested_text_is_found_by_vector_search(kb, tmp_path):
    (tmp_path / "lock.md").write_text("# Smart lock\n\nThe PPR-9087 smart lock fits doors 35 to 80 mm thick.")
    (tmp_path / "bulb.md").write_text("# Bulb\n\nThe SKY-20031 bulb supports warm and cold white light.")
    ingest(kb, tmp_path)
    hits = search(
        kb.tenant, SearchRequest(mode="vector", query="how thick can the door be for the smart lock", top_k=2)
    ).results
    assert hits[0].source_uri.endswith("lock.md")


def test_search_sees_only_the_callers_tenant(kb, tmp_path):
    other_kb = create_knowledge_base(tenant=TenantFactory(), name="docs")
    (tmp_path / "secret.txt").write_text("The other tenant's secret launch date is 2027-03-01.")
    ingest(other_kb, tmp_path / "secret.txt")
    hits = search(kb.tenant, SearchRequest(mode="vector", query="secret launch date", top_k=10)).results
    assert hits == []


def test_every_chunk_is_embedded_and_indexed_with_its_documents_title(kb, tmp_path, embedder):
    body = "\n\n".join(f"Paragraph {i}: the hinge is adjusted with a 4 mm hex key, turn by turn." * 3 for i in range(6))
    (tmp_path / "hinge.md").write_text(f"# Cabinet door hinge guide\n\n{body}")
    (tmp_path / "notes.txt").write_text("The hinge is adjusted with a hex key.")
    ingest(kb, tmp_path)
    document = Document.objects.get(knowledge_base=kb, source_uri__endswith="hinge.md")
    chunks = list(document.chunks.order_by("ordinal"))
    assert document.context == document.title == "Cabinet door hinge guide" and len(chunks) > 1
    # Stored once: the later chunks' text does not carry the title, their vectors do.
    assert not any(chunk.content.startswith("Cabinet door") for chunk in chunks[1:])
    for chunk in chunks:
        expected = embedder.embed_documents([f"{document.context}\n\n{chunk.content}"])[0]
        assert float(np.dot(np.asarray(chunk.embedding, dtype=float), expected)) > 0.999
    # A title without a parsed one (the file name) is no context.
    assert Document.objects.get(source_uri__endswith="notes.txt").context == ""
    # BM25 finds every chunk by a word that is only in the title, also after an index rebuild.
    for _ in range(2):
        request = SearchRequest(mode="bm25", query="cabinet", top_k=50, kb_ids=[kb.pk])
        assert {hit.chunk_id for hit in search(kb.tenant, request).results} == {chunk.pk for chunk in chunks}
        assert rebuild_lexical_index(kb.active_version) == kb.active_version.chunks.count()


def test_a_chunk_is_read_with_its_heading_path_stored_once(kb, tmp_path, embedder):
    (tmp_path / "kettle.md").write_text(
        "# Sky Kettle Guide\n\nThe kettle boils a litre in four minutes.\n\n## Setup\n\n### Pairing\n\n"
        "Hold the button for five seconds until the light blinks.\n\n"
        "## Cleaning\n\nDescale it monthly with citric acid.\n"
    )
    (tmp_path / "kettle.html").write_text(
        "<html><head><title>Kettle page</title></head><body><nav><h2>Menu</h2></nav><h1>Kettle page</h1>"
        "<h2>Warranty</h2><p>Two years on the heating element.</p></body></html>"
    )
    ingest(kb, tmp_path)
    document = Document.objects.get(knowledge_base=kb, source_uri__endswith="kettle.md")
    chunks = {chunk.metadata.get("section"): chunk for chunk in document.chunks.all()}
    assert set(chunks) == {None, "Setup > Pairing", "Cleaning"}  # the title leads no path
    pairing = chunks["Setup > Pairing"]
    assert "Setup" not in pairing.content and pairing.content.startswith("Pairing")
    expected = embedder.embed_documents([f"Sky Kettle Guide\n\nSetup > Pairing\n\n{pairing.content}"])[0]
    assert float(np.dot(np.asarray(pairing.embedding, dtype=float), expected)) > 0.999
    html = Document.objects.get(knowledge_base=kb, source_uri__endswith="kettle.html")
    assert [chunk.metadata.get("section") for chunk in html.chunks.all()] == ["Warranty"]  # <nav> is dropped
    # BM25 finds the chunk by a word only its heading path holds, also after an index rebuild; the hit
    # returns the path as its section.
    for _ in range(2):
        request = SearchRequest(mode="bm25", query="setup", top_k=5, kb_ids=[kb.pk])
        (hit,) = search(kb.tenant, request).results
        assert (hit.chunk_id, hit.section) == (pairing.pk, "Setup > Pairing")
        assert rebuild_lexical_index(kb.active_version) == kb.active_version.chunks.count()


def test_a_chunk_and_its_title_fit_the_models_window(tenant, tmp_path, embedder):
    kb = create_knowledge_base(tenant=tenant, name="wide", chunk_size=embedder.max_tokens, chunk_overlap=16)
    title = "Warranty terms for the outdoor kettle range sold in shops and online in every region " * 2
    sentences = " ".join(f"Clause {i} covers the heating element and the lid seal for two years." for i in range(80))
    (tmp_path / "w.txt").write_text(sentences)
    (tmp_path / "w.txt.meta.json").write_text(json.dumps({"title": title}))
    ingest(kb, tmp_path)
    document = Document.objects.get(knowledge_base=kb)
    context_tokens = embedder.count_tokens(document.context)
    assert context_tokens > 20
    for chunk in document.chunks.all():
        assert chunk.token_count + context_tokens <= embedder.max_tokens


PARAGRAPHS = [
    (
        "The SKY-4410 hub pairs over Zigbee: hold its pairing button for five seconds until the ring blinks blue. "
        "The app then lists it under new devices; choose it and enter the code printed under the hub."
    ),
    (
        "Store the lithium battery pack between 10 and 25 degrees Celsius, away from direct sunlight. "
        "A pack kept for months should be charged to half its capacity and checked every quarter."
    ),
    "退货须在收到商品后七天内申请。商品应保持完好,附带发票和全部配件。运费由买家承担,质量问题除外。",
]


def test_a_parent_child_kb_stores_parents_and_indexes_only_children(tenant, embedder, tmp_path):
    from knowledge.models import ParentChunk

    kb = create_knowledge_base(
        tenant=tenant, name="pc", chunking="parent_child", chunk_size=24, chunk_overlap=0, parent_chunk_size=64
    )
    (tmp_path / "manual.txt").write_text("\n\n".join(PARAGRAPHS))
    assert ingest(kb, tmp_path).added == 1
    document = Document.objects.get(knowledge_base=kb)
    parents = list(ParentChunk.objects.filter(document=document).order_by("ordinal"))
    assert [parent.content for parent in parents] == PARAGRAPHS  # a paragraph each: none is over 64 tokens
    assert all(parent.token_count == embedder.count_tokens(parent.content) <= 64 for parent in parents)
    assert all(parent.kb_version_id == kb.active_version_id and parent.tenant_id == tenant.pk for parent in parents)
    children = list(document.chunks.select_related("parent").order_by("ordinal"))
    assert document.chunk_count == len(children) > len(parents)
    squeezed = "".join  # a short passage joins the next with a blank line: compare without whitespace
    assert all(
        child.parent.document_id == document.pk
        and squeezed(child.content.split()) in squeezed(child.parent.content.split())
        for child in children
    )
    assert all(child.token_count <= 24 + SHORT_PASSAGE_TOKENS for child in children)  # as plain chunks may
    assert {child.parent_id for child in children} == {parent.pk for parent in parents}
    # Only children are searched: the keyword index holds each child once, no parent.
    bm25 = search(tenant, SearchRequest(query="退货 发票", mode="bm25", top_k=20)).results
    assert bm25 and {hit.chunk_id for hit in bm25} <= {child.pk for child in children}
    assert bm25[0].content == PARAGRAPHS[2]

    # Unchanged: nothing re-chunked (content MD5). Changed: parents and children replaced together.
    assert ingest(kb, tmp_path).unchanged == 1
    assert set(ParentChunk.objects.filter(document=document).values_list("pk", flat=True)) == {p.pk for p in parents}
    (tmp_path / "manual.txt").write_text("\n\n".join(PARAGRAPHS[:2]))
    assert ingest(kb, tmp_path).replaced == 1
    assert list(ParentChunk.objects.filter(document=document).values_list("content", flat=True)) == PARAGRAPHS[:2]
    assert not ParentChunk.objects.filter(pk__in=[parent.pk for parent in parents]).exists()
    kept = Chunk.objects.filter(document=document)
    assert kept.exists() and not kept.filter(parent__isnull=True).exists()
    assert set(kept.values_list("parent__document_id", flat=True)) == {document.pk}
    assert search(tenant, SearchRequest(query="退货 发票", mode="bm25", top_k=20)).results == []

    from knowledge.documents import delete_document

    delete_document(document)
    assert not ParentChunk.objects.filter(document=document).exists()
