"""What a search decides before its legs run (retrieval.services.planning): retriever weights by the
query's language and the KBs' floor."""

import pytest

from knowledge.knowledge_bases import update_search_settings
from tests.conftest import client_for
from tests.retrieval.services.conftest import names, run

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def test_chinese_query_skips_the_english_only_dense_leg(sample_kb):
    response = run(sample_kb, "鱼香肉丝里面有鱼吗", mode="hybrid", top_k=3)
    assert response.weights["vector"] == 0.0
    [notice] = response.notices
    assert notice["stage"] == "vector" and notice["code"] == "dense_skipped_language"
    assert notice["message"] in response.notes and "does not cover" in notice["message"]
    assert names(response)[0] == "sichuan-kitchen-menu.txt"
    assert set(response.results[0].retrievers) == {"bm25"}
    english = run(sample_kb, "firmware update", mode="hybrid", top_k=3)
    assert english.weights["vector"] == 1.0 and english.notes == [] and english.notices == []


def test_the_api_names_the_skipped_dense_leg_by_its_code(sample_kb):
    """A client matches ``notices[].code``, not the note's wording; the message stays in ``notes``."""
    body = {"query": "鱼香肉丝里面有鱼吗", "top_k": 3}
    answer = client_for(sample_kb.tenant).post("/api/v1/retrieval/hybrid", body, format="json").json()
    assert [(n["stage"], n["code"]) for n in answer["notices"]] == [("vector", "dense_skipped_language")]
    assert answer["notices"][0]["message"] in answer["notes"] and answer["degraded"] == []


def test_vector_mode_keeps_the_dense_leg_whatever_the_language(sample_kb):
    response = run(sample_kb, "鱼香肉丝", mode="vector", top_k=3)
    assert response.weights == {"vector": 1.0, "bm25": 0.0, "graph": 0.0} and len(response.results) == 3


def test_the_kbs_language_floor_weighs_the_dense_leg_of_uncovered_languages(sample_kb):
    update_search_settings(sample_kb, {"dense_weight_floor": 0.25})
    response = run(sample_kb, "鱼香肉丝里面有鱼吗", mode="hybrid", top_k=3)
    assert response.weights["vector"] == 0.25
    assert [(n["code"], "weighted 0.25" in n["message"]) for n in response.notices] == [
        ("dense_weighted_language", True)
    ]
    assert run(sample_kb, "鱼香肉丝里面有鱼吗", mode="hybrid", top_k=3, dense_weight_floor=0.0).weights["vector"] == 0.0
