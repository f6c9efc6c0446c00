"""What the MCP tools do beyond the transport (``retrieval.mcp_tools``; the SDK's client drives them in
test_mcp_server.py): a search of one knowledge base applies its default threshold when none is sent."""

from __future__ import annotations

import pytest

from knowledge.knowledge_bases import update_search_settings
from retrieval import mcp_tools
from tenants.services import create_api_key
from tests.factories import TenantFactory
from tests.retrieval.api_corpus import MANUALS, build_corpus

QUERY = "How should I return an unopened item for a refund?"


@pytest.mark.django_db
def test_a_search_of_one_kb_applies_its_default_threshold(tmp_path, embedder):
    corpus = build_corpus(tmp_path, TenantFactory(), {"manuals": MANUALS})
    kb, key = corpus.kbs["manuals"], create_api_key(tenant=corpus.tenant).api_key
    arguments = {"query": QUERY, "kb_ids": [kb.pk], "top_k": 5}
    results = mcp_tools.search(key, arguments)["results"]
    assert len(results) > 1
    threshold = max(hit["relevance"] for hit in results[1:]) + 1e-6
    update_search_settings(kb, {"score_threshold": threshold})
    assert [hit["chunk_id"] for hit in mcp_tools.search(key, arguments)["results"]] == [results[0]["chunk_id"]]
    # two KBs, or a threshold sent: the call's own (none) holds
    assert len(mcp_tools.search(key, {**arguments, "kb_ids": None})["results"]) == len(results)
