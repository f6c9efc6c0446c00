"""The Ingester's graph stage (knowledge.ingestion.pipeline): entities and relations written with the
chunks, extraction in its own thread, synonym groups as one entity, the optional LLM triples."""

import threading

import pytest

from knowledge.ingestion import pipeline
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.models import GraphEdge, GraphEntity, GraphMention, GraphPassageRelations, Synonym
from tests.knowledge.helpers import graph_names, ingest

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def test_ingestion_builds_the_graph_and_a_reingest_replaces_its_part(kb, tmp_path):
    path = tmp_path / "lock.txt"
    path.write_text("The PortaLock Pro lock PPR-9087 is made by Skyline Home.")
    (tmp_path / "sensor.txt").write_text("The AirSense monitor SKY-30452 is made by Skyline Home.")
    ingest(kb, tmp_path)
    names = graph_names(kb)
    assert {"ppr-9087", "portalock pro", "sky-30452"} <= names.keys()
    assert names["skyline home"] == 2
    mentions = GraphMention.objects.filter(kb_version=kb.active_version, entity__name="ppr-9087")
    mentioned = mentions.values_list("chunk__document__source_uri", flat=True)
    assert [uri.rsplit("/", 1)[-1] for uri in mentioned] == ["lock.txt"]
    path.write_text("The PortaLock Max lock PPR-9100 is made by Skyline Home.")
    ingest(kb, tmp_path)
    names = graph_names(kb)
    assert "ppr-9087" not in names and "ppr-9100" in names and names["skyline home"] == 2
    lock = GraphPassageRelations.objects.filter(
        kb_version=kb.active_version, chunk__document__source_uri__endswith="/lock.txt"
    )
    related = {entity for row in lock for entity in (*row.source_ids, *row.target_ids)}
    related_names = set(GraphEntity.objects.filter(pk__in=related).values_list("name", flat=True))
    assert {"ppr-9100", "skyline home"} <= related_names


def test_graph_extraction_runs_in_its_own_thread_and_each_chunk_gets_its_own(kb, tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "EMBED_FLUSH_CHUNKS", 1)
    codes = ["PPR-9087", "SKY-30452", "PPR-9100"]
    for i, code in enumerate(codes):
        (tmp_path / f"doc{i}.txt").write_text(f"The lock {code} is made by Skyline Home.")
    ingester = Ingester(kb)
    threads: set[str] = set()
    extract = ingester.extractor.extract

    def recording(text):
        threads.add(threading.current_thread().name.split("_")[0])
        return extract(text)

    monkeypatch.setattr(ingester.extractor, "extract", recording)
    report = ingester.ingest(discover_files([tmp_path]))
    assert (report.added, report.failed) == (3, 0)
    assert threads == {"ingest-extract"}
    for i, code in enumerate(codes):
        mentions = GraphMention.objects.filter(kb_version=kb.active_version, entity__name=code.lower())
        assert list(mentions.values_list("chunk__document__source_uri", flat=True)) == [f"{tmp_path.name}/doc{i}.txt"]
    assert graph_names(kb)["skyline home"] == 3


def test_synonym_groups_make_one_entity(kb, tmp_path):
    Synonym.objects.create(tenant=kb.tenant, terms=["PortaLock Pro", "PPR-9087"])
    (tmp_path / "a.txt").write_text("Skyline Home sells the PortaLock Pro door lock.")
    (tmp_path / "b.txt").write_text("The door lock PPR-9087 ships with two keys.")
    ingest(kb, tmp_path)
    names = graph_names(kb)
    assert names["portalock pro"] == 2 and "ppr-9087" not in names


@pytest.fixture
def triples_server(settings):
    from tests.engines.test_llm_triples import ChatServer

    with ChatServer() as server:
        settings.GRAPH_LLM_TRIPLES, settings.LLM_URL, settings.LLM_MODEL = True, server.url, "tiny"
        settings.LLM_TIMEOUT_S, settings.GRAPH_LLM_DEADLINE_S = 0.5, 1.0
        yield server


def test_typed_relations_from_the_llm_replace_co_occurrence_when_it_answers(kb, tmp_path, triples_server):
    (tmp_path / "lock.txt").write_text(
        "The PortaLock Pro door lock PPR-9087 is manufactured by Skyline Home in Shenzhen."
    )
    ingest(kb, tmp_path)
    edges = GraphEdge.objects.filter(kb_version=kb.active_version)
    typed = {(kind, frozenset(pair)) for *pair, kind in edges.values_list("source__name", "target__name", "kind")}
    assert ("manufactured_by", frozenset({"ppr-9087", "skyline home"})) in typed
    assert ("located_in", frozenset({"shenzhen", "skyline home"})) in typed
    assert not edges.filter(kind="").exists()
    assert len(triples_server.requests) == 1  # one call per document


@pytest.mark.parametrize("fault", ["garbage", "500", "slow"])
def test_an_llm_that_fails_leaves_co_occurrence_and_the_document_ready(kb, tmp_path, triples_server, fault, caplog):
    from tests.peers import Reply

    triples_server.reply = {
        "garbage": Reply(body=b"not json at all"),
        "500": Reply(500, {"error": "down"}),
        "slow": Reply(body=triples_server.completion({"triples": []}), drip_s=0.05),
    }[fault]
    (tmp_path / "lock.txt").write_text(
        "The PortaLock Pro door lock PPR-9087 is manufactured by Skyline Home in Shenzhen."
    )
    report = ingest(kb, tmp_path)
    assert (report.added, report.failed) == (1, 0)
    kinds = set(GraphEdge.objects.filter(kb_version=kb.active_version).values_list("kind", flat=True))
    assert kinds == {"", "made_by"}  # the extractor's own: co-occurrence and the relation the sentence states
    assert any("co-occurrence kept" in record.getMessage() for record in caplog.records)
