"""The ``evaluate`` command end to end: a BEIR dataset ingested and measured, compared, and a sweep on a
tenant's own knowledge base."""

import io
import json

import pytest
from django.core.management import CommandError, call_command

from knowledge.models import Document, KnowledgeBase
from retrieval.evaluation.protocol import CANDIDATES, CURRENT_DEFAULT, SetScores, choose
from tests.retrieval.evaluation.conftest import write_beir

TINY_CORPUS = [
    {"_id": "photo", "title": "Photosynthesis", "text": "Chlorophyll in leaves captures sunlight to make sugar."},
    {"_id": "volc.1", "title": "Volcanoes", "text": "Magma rises through the crust and erupts as lava."},
    {"_id": "tide/2", "title": "Tides", "text": "The gravity of the moon pulls the oceans into tides."},
    {"_id": "jazz", "title": "Jazz", "text": "Improvisation and swing rhythms define jazz music."},
    {"_id": "bread", "title": "Bread", "text": "Yeast ferments the dough, which makes bread rise."},
]
TINY_QUERIES = [
    {"_id": "q-photo", "text": "chlorophyll captures sunlight in leaves"},
    {"_id": "q-tide", "text": "why does the moon cause ocean tides"},
    {"_id": "q-music", "text": "improvised swing music"},
]
TINY_QRELS = [("q-photo", "photo", 1), ("q-tide", "tide/2", 2), ("q-music", "jazz", 1), ("q-music", "missing", 1)]


@pytest.mark.slow
@pytest.mark.django_db
def test_evaluate_command_end_to_end(tmp_path, settings):
    settings.VAR_DIR = tmp_path / "var"
    dataset = write_beir(tmp_path / "tiny", TINY_CORPUS, TINY_QUERIES, TINY_QRELS)
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    out = io.StringIO()
    call_command(
        "evaluate", dataset=dataset, split="test", output=first, rrf_k="20,60", threshold=0.05, no_progress=True,
        stdout=out,
    )  # fmt: skip
    assert "created knowledge base eval/tiny-all-minilm-l6-v2-" in out.getvalue()
    assert "keeps 90 %" in out.getvalue() and "relevant at 0" in out.getvalue()

    report = json.loads(first.read_text())
    assert {"commit", "machine", "settings", "model", "analyzer_version", "ingestion", "runs"} <= report.keys()
    assert report["dataset"]["judged_queries"] == 3
    assert report["dataset"]["judged_docs_missing_from_corpus"] == 1
    assert report["ingestion"]["added"] == 5
    # Titles are the documents' own (their chunks' context), not a line of their text.
    documents = Document.objects.filter(knowledge_base__name=report["knowledge_base"]["name"])
    texts = {row["title"]: row["text"] for row in TINY_CORPUS}
    assert {(d.title, d.context, d.chunks.get().content) for d in documents} == {(t, t, texts[t]) for t in texts}
    assert [run["label"] for run in report["runs"]] == [
        "vector cand=100",
        "bm25 cand=100",
        "hybrid cand=100 k=20",
        "hybrid cand=100 k=60",
    ]
    for run in report["runs"]:
        assert run["queries"] == 3 and set(run["per_query"]) == {"q-photo", "q-tide", "q-music"}
        assert all(0.0 <= value <= 1.0 for value in run["metrics"].values())
        assert run["latency_ms"]["p50"] > 0 and run["degraded_queries"] == 0
        judged = run["relevance_threshold"]
        assert judged["relevant_hits"] == 3  # each found relevant document once, at its best chunk
        assert judged["at_zero"]["judged_relevant"] == 0 and judged["threshold_keeping_90"] > 0
        assert judged["kept_at_reference"]["threshold"] == 0.05
        assert 0.0 <= judged["kept_at_reference"]["relevant_kept"] <= 1.0
        if run["mode"] != "bm25":  # dense search ranks all 5 documents for each of the 3 queries
            assert judged["other_hits"] == 12 and judged["curve"]
        # the music query has one of its two relevant documents missing from the corpus
        assert run["per_query"]["q-music"]["recall@100"] == 0.5
        if run["mode"] != "vector":
            assert run["per_query"]["q-photo"]["ndcg@10"] == 1.0

    out = io.StringIO()
    call_command("evaluate", dataset=dataset, split="test", output=second, modes="bm25", no_progress=True, stdout=out)
    assert "reusing knowledge base" in out.getvalue()
    assert json.loads(second.read_text())["ingestion"]["unchanged"] == 5

    out = io.StringIO()
    call_command("evaluate", compare=[first, second], stdout=out)
    assert "bm25 cand=100" in out.getvalue() and "+0.0000" in out.getvalue()


@pytest.mark.slow
@pytest.mark.django_db
def test_a_datasets_curated_vocabulary_goes_to_a_tenant_of_its_own(tmp_path, settings):
    from knowledge.models import DictionaryTerm, GraphEntity, Synonym

    settings.VAR_DIR = tmp_path / "var"
    dataset = write_beir(tmp_path / "tiny", TINY_CORPUS, TINY_QUERIES, TINY_QRELS)
    (dataset / "vocabulary").mkdir()
    (dataset / "vocabulary" / "protected-terms.csv").write_text("value,kind,note\nswing rhythms,term,a style\n")
    (dataset / "vocabulary" / "synonyms.csv").write_text(
        'terms,replacements,weight,active\n"magma,molten rock",,,true\n'
    )
    for _ in range(2):  # the second run finds the tenant's vocabulary as the files have it
        out = io.StringIO()
        call_command("evaluate", dataset=dataset, split="test", modes="bm25", no_progress=True, stdout=out,
                     output=tmp_path / "report.json")  # fmt: skip
    kb = KnowledgeBase.objects.select_related("tenant").get(name__startswith="tiny-")
    assert (
        kb.tenant.name.startswith("eval-tiny-")
        and f"reusing knowledge base {kb.tenant.name}/{kb.name}" in out.getvalue()
    )
    assert list(DictionaryTerm.objects.filter(tenant=kb.tenant).values_list("value", flat=True)) == ["swing rhythms"]
    assert [group.terms for group in Synonym.objects.filter(tenant=kb.tenant)] == [["magma", "molten rock"]]
    assert not DictionaryTerm.objects.filter(tenant__name="eval").exists()  # the other sets' tenant keeps none
    entities = GraphEntity.objects.filter(kb_version=kb.active_version)
    assert entities.filter(name="swing rhythms", kind="term").exists()  # a protected term is an entity

    (dataset / "vocabulary" / "protected-terms.csv").write_text("value,kind,note\n(unclosed,pattern,\n")
    with pytest.raises(CommandError, match=r"protected-terms.csv: line 2"):
        call_command("evaluate", dataset=dataset, split="test", modes="bm25", no_progress=True, stdout=io.StringIO())


# --- sweeps on a tenant's own knowledge base ----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db
def test_a_sweep_on_a_kbs_own_labelled_queries_suggests_and_writes_the_best_settings(tmp_path, tenant, embedder):
    docs = tmp_path / "docs"
    docs.mkdir()
    for row in TINY_CORPUS:
        text = f"# {row['title']}\n\n{row['text']}\n"
        (docs / f"{row['_id'].replace('/', '-')}.md").write_text(text, encoding="utf-8")
    call_command("ingest", str(docs), tenant=tenant.name, kb="science", no_progress=True, stdout=io.StringIO())
    # The user's labels name documents by file name (with or without the folder); no corpus.jsonl.
    judged = [("q-photo", "photo.md", 1), ("q-tide", f"{docs}/tide-2.md", 2), ("q-music", "jazz.md", 1)]
    labels = write_beir(tmp_path / "labels", [], TINY_QUERIES, judged)
    (labels / "corpus.jsonl").unlink()
    report_path, out = tmp_path / "sweep.json", io.StringIO()
    call_command(
        "evaluate", dataset=labels, split="test", tenant=tenant.name, kb="science", sweep=True, write=True,
        weights="vector=0,1,bm25=1", rrf_k="1,60", candidates="200", output=report_path, no_progress=True, stdout=out,
    )  # fmt: skip
    report = json.loads(report_path.read_text())
    assert report["ingestion"] is None and report["knowledge_base"]["tenant"] == tenant.name
    runs = report["runs"]
    assert [run["label"] for run in runs] == [
        "hybrid cand=200 w=vector=0,bm25=1 k=1",
        "hybrid cand=200 w=vector=0,bm25=1 k=60",
        "hybrid cand=200 w=vector=1,bm25=1 k=1",
        "hybrid cand=200 w=vector=1,bm25=1 k=60",
    ]
    assert all(run["queries"] == 3 and run["metrics"]["recall@100"] == 1.0 for run in runs)  # every label matched
    merit = [(run["metrics"]["ndcg@10"], run["metrics"]["recall@100"]) for run in runs]
    best = runs[merit.index(max(merit))]
    assert report["sweep"]["best"] == best["label"] and report["sweep"]["written"] is True
    expected = {"candidates": 200, "weights": best["weights"], "rrf_k": best["rrf_k"]}
    assert report["sweep"]["search_settings"] == expected
    kb = KnowledgeBase.objects.select_related("active_version").get(tenant=tenant, name="science")
    assert kb.active_version.search_settings == expected and kb.search_settings == {}
    assert f"best: {best['label']}" in out.getvalue()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"write": True}, "--write stores what --sweep found"),
        ({"tenant": "acme"}, "name it with --kb"),
        ({"candidates": "50,100"}, "--candidates 50: a search fuses at least its top_k"),
    ],
)
def test_sweep_options_that_cannot_work_are_refused(tmp_path, options, message):
    with pytest.raises(CommandError, match=message):
        call_command("evaluate", dataset=tmp_path, **options)


# --- the protocol for defaults ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db
def test_choose_default_runs_every_candidate_on_every_shared_split_and_names_the_winner(tmp_path, settings):
    settings.VAR_DIR = tmp_path / "var"
    root = tmp_path / "datasets"
    numbered = [{"_id": str(i), "text": query["text"]} for i, query in enumerate(TINY_QUERIES)]
    numbered.append({"_id": "3", "text": "how yeast makes the dough rise"})
    judged = [("0", "photo", 1), ("1", "tide/2", 1), ("2", "jazz", 1), ("3", "bread", 1)]
    write_beir(root / "scifact", TINY_CORPUS, numbered, judged, split="train")
    (root / "scifact" / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n0\tjazz\t1\n")  # held out
    bread = {"_id": "q-bread", "text": "why does bread rise"}
    write_beir(root / "tiny", TINY_CORPUS, [*TINY_QUERIES, bread], [*TINY_QRELS, ("q-bread", "bread", 1)], split="dev")
    (root / "notes").mkdir()  # not a dataset: skipped
    output, out = tmp_path / "choice.json", io.StringIO()
    call_command("evaluate", dataset=root, choose_default=True, output=output, no_progress=True, stdout=out)

    printed = out.getvalue()
    assert "nDCG@10 per half (queries: scifact/train 2/2, tiny/dev 2/2)" in printed  # q-music, q-bread are even
    assert "threshold share per half" in printed and "whole splits:" in printed
    report = json.loads(output.read_text())
    assert set(report["ndcg@10"]) == {"scifact/train", "tiny/dev"}  # the test split is never read
    runs = {"vector", "bm25", *CANDIDATES}
    assert all(set(table) == runs for table in report["ndcg@10"].values())
    assert set(report["threshold_share"]["tiny/dev"]) == set(CANDIDATES)
    whole = report["whole_splits"]["tiny/dev"]
    assert set(whole) == runs and whole["bm25"]["threshold_share"] is None
    assert all(0.0 <= whole[name]["threshold_share"] <= 1.0 for name in CANDIDATES)
    assert whole[CURRENT_DEFAULT]["at_zero"]["judged_relevant"] == 0
    # the decision printed and stored is the protocol's on the table it printed
    sets = {name: SetScores(report["ndcg@10"][name], report["threshold_share"][name]) for name in report["ndcg@10"]}
    decision = choose(CANDIDATES, CURRENT_DEFAULT, sets, "scifact/train")
    assert (report["winner"], report["selected"], report["default"]) == (
        decision.winner, decision.selected, CURRENT_DEFAULT
    )  # fmt: skip
    assert f"winner: {decision.winner} (current default: {CURRENT_DEFAULT})" in printed
    for verdict in decision.verdicts:
        assert verdict.candidate + ": even: " in printed


def test_choose_default_needs_the_reference_set(tmp_path):
    write_beir(tmp_path / "tiny", TINY_CORPUS, TINY_QUERIES, TINY_QRELS, split="dev")
    with pytest.raises(CommandError, match="no scifact dataset"):
        call_command("evaluate", dataset=tmp_path, choose_default=True, no_progress=True, stdout=io.StringIO())
