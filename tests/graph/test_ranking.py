"""The graph leg on ingested passages: entities of the query, their neighbours one or two hops away,
the passages that mention them, and the path each hit explains itself by."""

from __future__ import annotations

import pytest

from engines.base import Entity, Extraction
from graph.ranking import CO_OCCURRENCE, rank_by_graph
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from tests.factories import TenantFactory
from tests.retrieval.services.conftest import small_kb

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

# The answer passage (recall.txt) shares no word with the question "What did the maker of the
# PPR-9087 recall?" but names Skyline Home, which lock.txt relates to the PPR-9087.
FILES = {
    "lock.txt": "The PortaLock Pro door lock PPR-9087 is manufactured by Skyline Home in Shenzhen.",
    "recall.txt": "In 2025 Skyline Home recalled the AirSense monitor SKY-30452 over a faulty fan.",
    "menu.txt": "蜀香小馆的招牌菜是鱼香肉丝，主厨是王师傅。",
    "award.txt": "王师傅在成都美食节获得金奖。",
    "noise.txt": "Tomato seedlings need six hours of direct sunlight every day.",
}


@pytest.fixture
def kb(tmp_path, embedder):
    return small_kb(tmp_path, FILES, "graph", terms=("鱼香肉丝",))


def ranked_files(kb, query: str, hops: int) -> list[str]:
    from knowledge.models import Chunk

    ranking = rank_by_graph(kb.tenant_id, (kb.active_version_id,), query, hops=hops)
    names = dict(Chunk.objects.filter(pk__in=[c for c, _ in ranking.hits]).values_list("pk", "document__source_uri"))
    return [names[chunk_id].rsplit("/", 1)[-1] for chunk_id, _ in ranking.hits]


def test_one_hop_reaches_the_passage_that_names_a_neighbour(kb):
    assert ranked_files(kb, "What did the maker of the PPR-9087 recall?", hops=0) == ["lock.txt"]
    reached = ranked_files(kb, "What did the maker of the PPR-9087 recall?", hops=1)
    assert reached[0] == "lock.txt" and "recall.txt" in reached and "noise.txt" not in reached


def test_chinese_entities_hop_to_the_award(kb):
    assert "award.txt" not in ranked_files(kb, "鱼香肉丝的厨师得过什么奖", hops=0)
    assert "award.txt" in ranked_files(kb, "鱼香肉丝的厨师得过什么奖", hops=2)


# A KB nobody has curated: the dish is no dictionary name (鱼香肉丝 is tagged a person, and no surname
# starts it), but the menu marks it a signature dish and the chef by the kitchen he runs (由…掌勺).
UNCURATED = {
    "menu.txt": "蜀香小馆的招牌菜是鱼香肉丝，由王师傅掌勺。",
    "award.txt": "王师傅在成都美食节获得金奖。",
    "noise.txt": "Tomato seedlings need six hours of direct sunlight every day.",
}


def test_without_a_vocabulary_the_marked_dish_and_chef_reach_the_chefs_award(tmp_path, embedder):
    from knowledge.models import GraphEntity

    kb = small_kb(tmp_path, UNCURATED, "uncurated")  # no protected term, no synonym
    names = set(GraphEntity.objects.filter(kb_version_id=kb.active_version_id).values_list("name", flat=True))
    assert {"鱼香肉丝", "王师傅"} <= names
    assert "award.txt" not in ranked_files(kb, "鱼香肉丝的厨师得过什么奖", hops=0)
    assert ranked_files(kb, "鱼香肉丝的厨师得过什么奖", hops=2)[:2] == ["menu.txt", "award.txt"]


def explanations(ranking) -> list[dict]:
    return [ranking.explanation(chunk_id) for chunk_id, _ in ranking.hits]


def test_each_hit_explains_its_path(kb):
    ranking = rank_by_graph(kb.tenant_id, (kb.active_version_id,), "PPR-9087 recall", hops=2)
    paths = explanations(ranking)
    assert all(path["entities"] == ["PPR-9087"] for path in paths)
    assert {path["hops"] for path in paths} >= {0, 1}
    for path in paths:  # entity, relation, entity, ...
        assert path["path"][0] == "PPR-9087" and len(path["path"]) == 2 * path["hops"] + 1
        assert set(path["path"][1::2]) <= {CO_OCCURRENCE, "made_by"}


def test_a_path_names_the_relation_a_sentence_states_in_the_direction_walked(kb, tmp_path):
    """lock.txt says the PPR-9087 "is manufactured by" Skyline Home: made_by from the lock, makes back."""
    box = tmp_path / "extra" / "box.txt"
    box.parent.mkdir()
    box.write_text("The PPR-9087 ships in a blue box.", encoding="utf-8")
    Ingester(kb).ingest(discover_files([box.parent]))
    to_recall = rank_by_graph(kb.tenant_id, (kb.active_version_id,), "PPR-9087", hops=2)
    assert ["PPR-9087", "made_by", "Skyline Home"] in [path["path"] for path in explanations(to_recall)]
    from_maker = rank_by_graph(kb.tenant_id, (kb.active_version_id,), "Skyline Home", hops=1)
    assert ["Skyline Home", "makes", "PPR-9087"] in [path["path"] for path in explanations(from_maker)]  # box.txt
    # recall.txt states nothing of Skyline Home and the SKY-30452: from the monitor, they only co-occur
    from_monitor = rank_by_graph(kb.tenant_id, (kb.active_version_id,), "SKY-30452", hops=1)
    assert ["SKY-30452", CO_OCCURRENCE, "Skyline Home"] in [path["path"] for path in explanations(from_monitor)]


def test_a_path_names_the_llm_relation_kind(kb):
    """A typed triple's kind names its step; the other steps co-occur."""
    from knowledge.models import Chunk
    from knowledge.stores import graph_store

    lock = Chunk.objects.get(kb_version=kb.active_version, document__source_uri__endswith="lock.txt")
    entities = (Entity("ppr-9087", "PPR-9087", "code", 1), Entity("skyline home", "Skyline Home", "name", 1))
    typed = Extraction.by_name(entities, [("ppr-9087", "skyline home", 1.0, "manufactured_by")])
    graph_store().write(kb.tenant_id, kb.active_version_id, {lock.pk: typed}, replacing=[lock.pk])
    ranking = rank_by_graph(kb.tenant_id, (kb.active_version_id,), "PPR-9087", hops=2)
    paths = [path["path"] for path in explanations(ranking) if path["hops"] >= 1]
    assert paths and all(path[:3] == ["PPR-9087", "manufactured_by", "Skyline Home"] for path in paths)
    assert all(kind == CO_OCCURRENCE for path in paths for kind in path[3::2])


def test_a_query_without_known_entities_finds_nothing(kb):
    assert rank_by_graph(kb.tenant_id, (kb.active_version_id,), "quantum chromodynamics", hops=2).hits == []


def test_another_tenant_sees_nothing(kb):
    other = TenantFactory()
    assert rank_by_graph(other.pk, (kb.active_version_id,), "PPR-9087", hops=2).hits == []


def test_a_misspelt_latin_name_finds_its_entity(kb, settings):
    question = "What did the maker of the Portalok Pro recall?"
    reached = ranked_files(kb, question, hops=1)
    assert reached[0] == "lock.txt" and "recall.txt" in reached
    ranking = rank_by_graph(kb.tenant_id, (kb.active_version_id,), question, hops=0)
    assert {path["entities"][0] for path in explanations(ranking)} == {"PortaLock Pro"}
    settings.GRAPH_FUZZY_SIMILARITY = 0  # exact names only
    assert ranked_files(kb, question, hops=1) == []


def test_codes_never_match_fuzzily(kb):
    assert ranked_files(kb, "PPR-9078", hops=0) == []  # another product, not a typo to correct


def test_a_graph_of_another_extractor_is_searched_with_a_note_until_rebuild_graph(kb):
    from engines.graph_extraction import EXTRACTOR_VERSION
    from graph.build import rebuild_graph
    from knowledge.models import Chunk, KnowledgeBaseVersion
    from knowledge.stores import graph_store

    version = kb.active_version
    assert version.graph_extractor == EXTRACTOR_VERSION  # a new version is built by the current extractor
    assert rank_by_graph(kb.tenant_id, (version.pk,), "PPR-9087", hops=1).notes == []
    lock = Chunk.objects.get(kb_version=version, document__source_uri__endswith="lock.txt")
    graph_store().delete(kb.tenant_id, version.pk, [lock.pk])  # an older graph without its entities
    KnowledgeBaseVersion.objects.filter(pk=version.pk).update(graph_extractor="0")
    stale = rank_by_graph(kb.tenant_id, (version.pk,), "PPR-9087", hops=1)
    assert stale.hits == [] and len(stale.notes) == 1 and "rebuild_graph" in stale.notes[0]

    assert rebuild_graph(version) == Chunk.objects.filter(kb_version=version).count()
    assert KnowledgeBaseVersion.objects.get(pk=version.pk).graph_extractor == EXTRACTOR_VERSION
    rebuilt = rank_by_graph(kb.tenant_id, (version.pk,), "PPR-9087", hops=1)
    assert rebuilt.notes == [] and ranked_files(kb, "PPR-9087", hops=0) == ["lock.txt"]


def test_rebuild_graph_refuses_to_replace_typed_relations(kb, settings):
    from graph.build import rebuild_graph
    from knowledge.errors import VersionConflict

    settings.GRAPH_LLM_TRIPLES, settings.LLM_URL = True, "http://127.0.0.1:9/v1"
    with pytest.raises(VersionConflict, match="GRAPH_LLM_TRIPLES"):
        rebuild_graph(kb.active_version)
