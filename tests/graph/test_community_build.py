"""Communities of a KB version's graph, built by the service the ingestion task, the ingest command and
the worker run: Leiden over the version's real entity graph, summaries, supporting passages, vectors."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from engines.base import GraphScope
from graph.community_build import rebuild_communities
from knowledge.documents import delete_document
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base
from knowledge.models import Chunk, Document, GraphEntity
from knowledge.selectors.search import analyzer_for_tenant
from knowledge.stores import graph_store
from tests.peers import Reply

LOCKS = [
    "The PortaLock Pro lock PPR-9087 is made by Skyline Home. The PPR-9087 takes the PPR-9087-BAT battery pack.",
    "Charge the PPR-9087-BAT battery pack of the PortaLock Pro before installing the PPR-9087 lock.",
    "Skyline Home recalled PPR-9087-BAT battery packs of the PortaLock Pro after overheating reports.",
]
DISHES = [
    "蜀香小馆位于成都武侯区，招牌菜是鱼香肉丝和宫保鸡丁。",
    "鱼香肉丝是川菜，蜀香小馆的鱼香肉丝用郫县豆瓣调味，宫保鸡丁含花生。",
    "成都的蜀香小馆每天供应宫保鸡丁、鱼香肉丝和麻婆豆腐。",
]


DISH_NAMES = ["鱼香肉丝", "宫保鸡丁", "麻婆豆腐"]  # the tenant's curated terms: jieba tags no dish as a name


@pytest.fixture
def kb(tenant, embedder, tmp_path):
    from knowledge.models import DictionaryTerm

    DictionaryTerm.objects.bulk_create(DictionaryTerm(tenant=tenant, value=name) for name in DISH_NAMES)
    kb = create_knowledge_base(tenant=tenant, name="docs", chunk_size=120, chunk_overlap=16)
    for name, texts in (("locks", LOCKS), ("dishes", DISHES)):
        for position, text in enumerate(texts):
            (tmp_path / f"{name}-{position}.txt").write_text(text)
    Ingester(kb).ingest(discover_files([tmp_path]))
    return kb


def names_of(kb, entity_ids) -> set[str]:
    return set(
        GraphEntity.objects.filter(kb_version=kb.active_version, pk__in=entity_ids).values_list("name", flat=True)
    )


def communities_of(kb):
    return graph_store().communities(GraphScope(kb.tenant_id, (kb.active_version_id,)))


def test_each_topic_is_a_community_with_its_summary_passages_and_vector(kb, embedder):
    count = rebuild_communities(kb.active_version)
    communities = communities_of(kb)
    assert count == len(communities) > 0
    top = [c for c in communities if c.level == 0]
    locks = next(c for c in top if "ppr-9087" in names_of(kb, c.entity_ids))
    dishes = next(c for c in top if "鱼香肉丝" in names_of(kb, c.entity_ids))
    assert locks is not dishes
    assert "鱼香肉丝" not in names_of(kb, locks.entity_ids) and "ppr-9087" not in names_of(kb, dishes.entity_ids)
    analyzer = analyzer_for_tenant(kb.tenant_id)
    for community in communities:
        assert community.summary.startswith("Key entities: " + ", ".join(community.key_entities) + ".")
        assert len(community.summary) > len("Key entities: " + ", ".join(community.key_entities) + ".")
        assert community.analyzed == analyzer.analyze(community.summary)
        assert len(community.embedding) == embedder.dimension
        chunks = Chunk.objects.filter(pk__in=community.chunk_ids, kb_version=kb.active_version)
        assert chunks.count() == len(community.chunk_ids) > 0
    lock_passages = Chunk.objects.filter(pk__in=locks.chunk_ids).values_list("document__source_uri", flat=True)
    assert all("/locks-" in uri for uri in lock_passages)


def test_a_rebuild_replaces_the_communities_and_follows_deleted_documents(kb):
    rebuild_communities(kb.active_version)
    first = communities_of(kb)
    rebuild_communities(kb.active_version)
    assert communities_of(kb) == first  # same graph, same communities
    for document in Document.objects.filter(knowledge_base=kb, source_uri__contains="/dishes-"):
        delete_document(document)
    rebuild_communities(kb.active_version)
    remaining = set(Chunk.objects.filter(kb_version=kb.active_version).values_list("id", flat=True))
    after = communities_of(kb)
    assert after and all(set(c.chunk_ids) <= remaining for c in after)
    assert all("鱼香肉丝" not in names_of(kb, c.entity_ids) for c in after)


def test_a_version_without_relations_has_no_communities(tenant, embedder, tmp_path):
    kb = create_knowledge_base(tenant=tenant, name="empty")
    assert rebuild_communities(kb.active_version) == 0
    assert communities_of(kb) == []


@pytest.fixture
def summary_server(settings):
    from tests.engines.test_llm_triples import ChatServer

    with ChatServer() as server:
        server.reply = Reply(body=server.completion("These entities are about smart locks and their batteries."))
        settings.GRAPH_LLM_SUMMARIES, settings.LLM_URL, settings.LLM_MODEL = True, server.url, "tiny"
        settings.LLM_TIMEOUT_S, settings.GRAPH_LLM_DEADLINE_S = 0.5, 1.0
        yield server


def test_the_llm_writes_the_summaries_of_the_biggest_communities_when_configured(kb, summary_server, settings):
    settings.GRAPH_LLM_MAX_SUMMARIES = 1
    rebuild_communities(kb.active_version)
    communities = communities_of(kb)
    by_llm = [c for c in communities if c.summary.endswith("about smart locks and their batteries.")]
    assert len(by_llm) == len(summary_server.requests) == 1  # the cap: the rest stay extractive
    assert by_llm[0].summary.startswith("Key entities: " + ", ".join(by_llm[0].key_entities) + ". These")
    prompt = summary_server.requests[0].json()["messages"][1]["content"]
    assert prompt.startswith("Key entities: ") and "Passages:" in prompt


@pytest.mark.parametrize("reply", [Reply(500, {"error": "down"}), Reply(body=b"garbage")])
def test_an_llm_that_fails_leaves_every_summary_extractive_after_one_call(kb, summary_server, reply):
    summary_server.reply = reply
    rebuild_communities(kb.active_version)
    communities = communities_of(kb)
    assert len(communities) > 1 and len(summary_server.requests) == 1
    assert all("smart locks" not in c.summary for c in communities)


def test_the_command_recomputes_the_communities_of_the_chosen_kb(kb, tenant):
    assert communities_of(kb) == []  # ingesting in-process leaves them to the task
    out = io.StringIO()
    call_command("graph_communities", "--kb", kb.name, "--tenant", tenant.name, stdout=out)
    count = len(communities_of(kb))
    assert count > 0 and out.getvalue().startswith(f"{kb}: {count} communities in ")
    with pytest.raises(CommandError, match="no matching knowledge base"):
        call_command("graph_communities", "--kb", kb.name, "--tenant", "someone else")
