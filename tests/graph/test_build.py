"""Rebuilding a version's graph (``graph.build``): the current extractor with the vocabulary
an admin curates in the console, and without the names in a large share of the version's passages. The
expected entities are written by hand."""

import io
import re

import pytest
from django.core.management import call_command

from engines import graph_extraction
from graph.build import rebuild_graph
from knowledge.models import GraphMention, KnowledgeBaseVersion
from tests.knowledge.helpers import graph_names, ingest

pytestmark = pytest.mark.django_db

TERMS = "/admin/knowledge/dictionaryterm/import/"
SYNONYMS = "/admin/knowledge/synonym/import/"


def test_a_term_and_a_synonym_group_curated_in_the_console_become_entities_on_rebuild(admin_client, kb, tmp_path):
    (tmp_path / "menu.txt").write_text("The wok station fries kung pao chicken. 本店的宫保鸡丁很辣。", encoding="utf-8")
    ingest(kb, tmp_path)
    assert not {"wok station", "kung pao chicken"} & graph_names(kb).keys()
    terms = {"tenant": kb.tenant_id, "format": "terms-csv", "text": "value,kind,note\nwok station,term,\n"}
    synonyms = {"tenant": kb.tenant_id, "format": "synonyms-csv", "text": 'terms\n"kung pao chicken, 宫保鸡丁"\n'}
    for url, form in ((TERMS, terms), (SYNONYMS, synonyms)):
        assert admin_client.post(url, {**form, "apply": "Apply"}).status_code == 302
    rebuild_graph(kb.active_version)
    assert {"wok station", "kung pao chicken"} <= graph_names(kb).keys()
    dish = GraphMention.objects.get(kb_version=kb.active_version, entity__name="kung pao chicken")
    assert dish.count == 2  # the English name and its Chinese alias: one entity


def test_a_rebuild_drops_the_names_in_a_large_share_of_the_versions_passages(kb, tmp_path, monkeypatch):
    monkeypatch.setattr(graph_extraction, "COMMON_MIN_PASSAGES", 8)
    for number in range(10):
        shop = "Skyline Home ships it." if number == 0 else "Harbor Noodle House cooks."
        (tmp_path / f"note{number}.txt").write_text(f"{shop} Order ORD-{number:04d} waits.", encoding="utf-8")
    ingest(kb, tmp_path)
    assert graph_names(kb)["harbor noodle house"] == 9  # ingestion alone does not know the share
    rebuild_graph(kb.active_version)
    names = graph_names(kb)
    assert "harbor noodle house" not in names  # in 9 of 10 passages
    assert names["skyline home"] == names["ord-0003"] == 1  # in a tenth of them: not more


def test_the_command_re_extracts_each_chunk_then_its_communities(kb, tmp_path):
    (tmp_path / "a.txt").write_text("The zeppelin ZR-3 departs at dawn.\n\nIt lands at Lake Constance at dusk.")
    (tmp_path / "b.txt").write_text("The submarine NX-1 dives at noon.")
    ingest(kb, tmp_path)
    version = kb.active_version
    KnowledgeBaseVersion.objects.filter(pk=version.pk).update(graph_extractor="0")
    mentions = set(GraphMention.objects.filter(kb_version=version).values_list("entity__name", "chunk_id"))
    assert mentions
    out = io.StringIO()
    call_command("rebuild_graph", kb=kb.name, tenant=kb.tenant.name, stdout=out)
    assert re.search(rf"{version.chunks.count()} chunks extracted, \d+ communities", out.getvalue())
    assert set(GraphMention.objects.filter(kb_version=version).values_list("entity__name", "chunk_id")) == mentions
    version.refresh_from_db()
    assert version.graph_extractor == KnowledgeBaseVersion._meta.get_field("graph_extractor").get_default()
