"""Relevance metrics against hand-computed numbers, and the ``evaluate`` command end to end."""

import io
import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from knowledge.models import Document, KnowledgeBase
from retrieval.evaluation import (
    DEPTH,
    build_variants,
    compare_reports,
    corpus_id_from_uri,
    doc_filename,
    git_commit,
    load_dataset,
    mrr_at_k,
    ndcg_at_k,
    parse_feedback,
    parse_weight_grid,
    recall_at_k,
    score_query,
    suggested_settings,
    threshold_curve,
)

LOG2_3 = math.log2(3)  # 1.5849625, the discount at rank 2


# --- nDCG -------------------------------------------------------------------------------------------


def test_ndcg_uses_the_grade_as_gain_with_a_log2_discount():
    judgments = {"a": 2, "b": 1, "c": 0, "d": 1}
    # rank:   1: c (gain 0)   2: a (gain 2)   3: x (unjudged, 0)   4: b (gain 1); d not retrieved
    # DCG  = 0/log2(2) + 2/log2(3) + 0/log2(4) + 1/log2(5) = 1.2618595 + 0.4306766 = 1.6925361
    # IDCG = grades sorted 2, 1, 1: 2/log2(2) + 1/log2(3) + 1/log2(4) = 2 + 0.6309298 + 0.5 = 3.1309298
    # nDCG = 1.6925361 / 3.1309298 = 0.5405858
    # (gain 2^rel - 1 would give (3/1.585 + 1/2.3219) / (3 + 0.6309 + 0.5) = 0.5625)
    assert ndcg_at_k(["c", "a", "x", "b"], judgments, 10) == pytest.approx(0.5405858, abs=1e-6)


def test_ndcg_of_the_ideal_ranking_is_one_whatever_the_order_of_tied_grades():
    judgments = {"a": 1, "b": 1, "c": 2}
    assert ndcg_at_k(["c", "a", "b"], judgments) == pytest.approx(1.0)
    assert ndcg_at_k(["c", "b", "a"], judgments) == pytest.approx(1.0)


def test_a_document_counts_once_at_the_rank_of_its_best_chunk():
    # x has two chunks at ranks 1 and 2: deduplicated, a moves up from rank 3 to rank 2.
    # DCG = 1/log2(3) = 0.6309298; IDCG = 1 (a single relevant document at rank 1)
    # nDCG = 0.6309298 (without deduplication it would be 1/log2(4) = 0.5)
    assert ndcg_at_k(["x", "x", "a"], {"a": 1}) == pytest.approx(1 / LOG2_3)
    assert mrr_at_k(["x", "x", "a"], {"a": 1}) == pytest.approx(1 / 2)


def test_ndcg_cuts_at_k():
    ranking = [f"x{i}" for i in range(10)] + ["a"]  # a at rank 11
    assert ndcg_at_k(ranking, {"a": 1}, 10) == 0.0
    # at k = 11: DCG = 1/log2(12) = 0.2789429; IDCG = 1
    assert ndcg_at_k(ranking, {"a": 1}, 11) == pytest.approx(1 / math.log2(12))


def test_no_relevant_document_retrieved_scores_zero_everywhere():
    scores = score_query(["x", "y", "z"], {"a": 1, "b": 2})
    assert scores == {"ndcg@10": 0.0, "recall@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}


def test_a_query_without_positive_judgments_scores_zero_not_nan():
    scores = score_query(["a"], {"a": 0})
    assert scores == {"ndcg@10": 0.0, "recall@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}


def test_judgments_of_documents_missing_from_the_corpus_still_count():
    judgments = {"a": 1, "gone": 1}  # "gone" can never be retrieved
    # DCG = 1/log2(2) = 1; IDCG = 1 + 1/log2(3) = 1.6309298; nDCG = 0.6131472
    assert ndcg_at_k(["a", "x"], judgments) == pytest.approx(1 / (1 + 1 / LOG2_3))
    # Recall = 1 relevant retrieved / 2 relevant judged = 0.5
    assert recall_at_k(["a", "x"], judgments, 10) == 0.5
    assert mrr_at_k(["a", "x"], judgments) == 1.0


# --- Recall and MRR ---------------------------------------------------------------------------------


def test_recall_counts_relevant_documents_within_k_over_all_relevant():
    judgments = {"a": 1, "b": 1, "c": 1, "n": 0}
    ranking = ["a", "n"] + [f"x{i}" for i in range(8)] + ["b"]  # a at 1, n (grade 0) at 2, b at 11
    assert recall_at_k(ranking, judgments, 10) == pytest.approx(1 / 3)  # a only: 1 / 3
    assert recall_at_k(ranking, judgments, 100) == pytest.approx(2 / 3)  # a and b: 2 / 3


def test_mrr_is_the_reciprocal_rank_of_the_first_relevant_document_within_ten():
    assert mrr_at_k(["n", "x", "b"], {"n": 0, "b": 1}) == pytest.approx(1 / 3)  # n is judged 0: b at rank 3
    assert mrr_at_k([f"x{i}" for i in range(10)] + ["b"], {"b": 1}) == 0.0  # rank 11 is beyond the cut


# --- datasets, ids, variants ------------------------------------------------------------------------


def write_beir(folder, corpus, queries, qrels, split="test"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in corpus), encoding="utf-8")
    (folder / "queries.jsonl").write_text("".join(json.dumps(row) + "\n" for row in queries), encoding="utf-8")
    (folder / "qrels").mkdir(exist_ok=True)
    rows = "".join(f"{qid}\t{doc}\t{score}\n" for qid, doc, score in qrels)
    (folder / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows, encoding="utf-8")
    return folder


def test_load_dataset_keeps_judged_queries_and_counts_judgments_of_missing_documents(tmp_path):
    folder = write_beir(
        tmp_path / "tiny",
        corpus=[{"_id": "d1", "title": "T", "text": "one"}, {"_id": "d2", "title": "", "text": "two"}],
        queries=[{"_id": "q1", "text": "one"}, {"_id": "q2", "text": "two"}, {"_id": "q3", "text": "three"}],
        qrels=[("q1", "d1", 1), ("q1", "gone", 1), ("q2", "d2", 0), ("q4", "d1", 1)],
    )
    dataset = load_dataset(folder, "test")
    # q2 has no positive judgment, q3 none at all, q4 no query text: only q1 is evaluated
    assert dataset.qrels == {"q1": {"d1": 1, "gone": 1}}
    assert dataset.missing_judged_docs == 1
    assert dataset.corpus["d1"] == ("T", "one")
    assert len(dataset.corpus_sha256) == 64


@pytest.mark.parametrize("corpus_id", ["4983", "a/b", "..", ".hidden", "100%", "DEV_12_QUERY_3", "文章-1 2"])
def test_file_names_map_back_to_corpus_ids(corpus_id):
    name = doc_filename(corpus_id)
    assert "/" not in name and not name.startswith(".")
    assert corpus_id_from_uri(f"scifact-1234abcd/{name}") == corpus_id


def test_weight_grids_expand_to_every_combination():
    assert parse_weight_grid("vector=0.5,bm25=1") == [(("vector", 0.5), ("bm25", 1.0))]
    assert parse_weight_grid("vector=0.5,1,bm25=1,2") == [
        (("vector", 0.5), ("bm25", 1.0)),
        (("vector", 0.5), ("bm25", 2.0)),
        (("vector", 1.0), ("bm25", 1.0)),
        (("vector", 1.0), ("bm25", 2.0)),
    ]
    with pytest.raises(ValueError, match="a value must follow a name"):
        parse_weight_grid("0.5,bm25=1")


def test_fusion_sweeps_give_one_row_per_value_for_hybrid_and_one_for_single_leg_modes():
    variants = build_variants(["bm25", "hybrid"], candidates=[100], rrf_ks=[20, 60])
    assert [v.label for v in variants] == ["bm25 cand=100", "hybrid cand=100 k=20", "hybrid cand=100 k=60"]
    request = variants[1].request("q", kb_id=7)
    assert (request.top_k, request.candidates, request.rrf_k, request.kb_ids) == (DEPTH, 100, 20, [7])


def test_fusion_methods_are_hybrid_variants_and_a_score_fusion_takes_no_rrf_k():
    variants = build_variants(["vector", "hybrid"], candidates=[100], rrf_ks=[20, 60], fusions=["rrf", "relevance"])
    assert [v.label for v in variants] == [
        "vector cand=100", "hybrid cand=100 fusion=rrf k=20", "hybrid cand=100 fusion=relevance",
        "hybrid cand=100 fusion=rrf k=60",
    ]  # fmt: skip
    request = variants[2].request("q", kb_id=7)
    assert (request.fusion, request.rrf_k) == ("relevance", None)
    assert suggested_settings(variants[2]) == {"candidates": 100, "fusion": "relevance"}


def test_leg_weights_and_leg_candidates_are_hybrid_variants_and_reach_the_request_and_the_suggestion():
    """Leg weights are RRF's (none for a score fusion); leg candidates apply to every fusion."""
    variants = build_variants(
        ["hybrid", "bm25"], candidates=[100], fusions=["rrf", "relevance"], leg_weights=["fixed", "evidence"],
        leg_candidates=["own", "union"],
    )  # fmt: skip
    assert [v.label for v in variants] == [
        "hybrid cand=100 fusion=rrf legs=fixed candidates_of=own",
        "hybrid cand=100 fusion=rrf legs=fixed candidates_of=union",
        "hybrid cand=100 fusion=rrf legs=evidence candidates_of=own",
        "hybrid cand=100 fusion=rrf legs=evidence candidates_of=union",
        "hybrid cand=100 fusion=relevance candidates_of=own", "hybrid cand=100 fusion=relevance candidates_of=union",
        "bm25 cand=100",
    ]  # fmt: skip
    fixed_own = variants[0].request("q", kb_id=7)
    assert (fixed_own.leg_weights, fixed_own.leg_candidates) == ("fixed", "own")
    assert variants[5].request("q", kb_id=7).leg_weights is None
    assert variants[6].request("q", kb_id=7).leg_candidates is None
    assert suggested_settings(variants[1]) == {
        "candidates": 100,
        "fusion": "rrf",
        "leg_weights": "fixed",
        "leg_candidates": "union",
    }


def test_feedback_variants_apply_to_the_modes_with_a_bm25_leg_and_reach_the_request():
    assert parse_feedback("10:5:0.7") == (10, 5, 0.7) and parse_feedback("0")[0] == 0
    with pytest.raises(ValueError, match="expected DOCS:TERMS:QUERY_WEIGHT"):
        parse_feedback("10:5")
    variants = build_variants(["vector", "bm25"], candidates=[100], feedbacks=[parse_feedback("0"), (10, 5, 0.7)])
    assert [v.label for v in variants] == ["vector cand=100", "bm25 cand=100 rm3=off", "bm25 cand=100 rm3=10x5@0.7"]
    request = variants[2].request("q", kb_id=7)
    assert (request.feedback_docs, request.feedback_terms, request.feedback_query_weight) == (10, 5, 0.7)
    assert suggested_settings(variants[2]) == {
        "candidates": 100,
        "feedback_docs": 10,
        "feedback_terms": 5,
        "feedback_query_weight": 0.7,
    }


def report(label, per_query):
    run = {"label": label, "mode": label.split()[0], "latency_ms": {"p50": 10.0}, "per_query": per_query}
    return {"runs": [run]}


def scores(ndcg, recall=1.0):
    return {"ndcg@10": ndcg, "recall@10": recall, "recall@100": recall, "mrr@10": ndcg}


def test_compare_reports_gives_paired_per_metric_deltas_over_shared_queries():
    before = report("bm25 cand=100", {"q1": scores(1.0), "q2": scores(0.0, 0.0), "q3": scores(0.5), "q4": scores(0.0)})
    after = report("bm25 cand=100", {"q1": scores(1.0), "q2": scores(0.3), "q3": scores(0.5)})
    [row] = compare_reports(before, after)
    assert (row["label"], row["queries"]) == ("bm25 cand=100", 3)  # q4 was not run after: left out
    # nDCG@10 before (1.0 + 0.0 + 0.5) / 3 = 0.5, after (1.0 + 0.3 + 0.5) / 3 = 0.6: delta +0.1
    # Recall before (1 + 0 + 1) / 3 = 0.6667, after 3 / 3 = 1.0: delta +0.3333
    assert row["delta"] == {"ndcg@10": 0.1, "recall@10": 0.3333, "recall@100": 0.3333, "mrr@10": 0.1}
    assert (row["ndcg@10_better"], row["ndcg@10_worse"]) == (1, 0)


def test_compare_pairs_the_single_run_of_a_mode_when_labels_differ():
    before = report("hybrid cand=100", {"q1": scores(0.5)})
    after = report("hybrid cand=100 k=20", {"q1": scores(0.4)})
    [row] = compare_reports(before, after)
    assert row["label"] == "hybrid cand=100 -> hybrid cand=100 k=20"
    assert row["delta"]["ndcg@10"] == -0.1 and row["ndcg@10_worse"] == 1


# --- the command end to end ---------------------------------------------------------------------------

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
    call_command("evaluate", dataset=dataset, split="test", output=first, rrf_k="20,60", no_progress=True, stdout=out)
    assert "created knowledge base eval/tiny-all-minilm-l6-v2-" in out.getvalue()

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


def test_threshold_curve_counts_relevant_hits_kept_where_half_of_the_others_drop():
    relevant, others = [0.9, 0.6, 0.3], [0.5, 0.2, 0.1, 0.4, 0.3]
    judged = [(score, True) for score in relevant] + [(score, False) for score in others]
    curve = threshold_curve(judged, steps=4)
    # the others' median is 0.3: the relevant hits at 0.9, 0.6 and 0.3 all stay
    assert curve["threshold_dropping_half_of_others"] == 0.3 and curve["relevant_kept_there"] == 1.0
    at_half = {"threshold": 0.5, "relevant_kept": pytest.approx(2 / 3, abs=1e-4), "others_dropped": 0.8}
    assert curve["curve"][2] == at_half
    assert curve["curve"][0]["relevant_kept"] == 1.0 and curve["curve"][-1]["relevant_kept"] == 0.0
    assert threshold_curve([(0.5, True)]) == {"relevant_hits": 1, "other_hits": 0, "curve": []}


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


@pytest.mark.skipif(shutil.which("git") is None, reason="needs the git binary to build a checkout and a worktree")
def test_the_report_names_the_commit_of_a_checkout_and_of_a_linked_worktree(tmp_path, settings):
    def git(*arguments: str, cwd: Path) -> str:
        environment = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                       "GIT_COMMITTER_EMAIL": "t@t", "PATH": os.environ["PATH"], "HOME": str(tmp_path)}  # fmt: skip
        return subprocess.run(["git", *arguments], cwd=cwd, env=environment, check=True, capture_output=True,
                              text=True).stdout.strip()  # fmt: skip

    checkout, worktree = tmp_path / "checkout", tmp_path / "worktree"
    checkout.mkdir()
    git("init", "-q", cwd=checkout)
    git("commit", "-q", "--allow-empty", "-m", "first", cwd=checkout)
    git("worktree", "add", "-q", "-b", "feature", str(worktree), cwd=checkout)
    git("commit", "-q", "--allow-empty", "-m", "second", cwd=worktree)
    git("pack-refs", "--all", cwd=checkout)  # branch heads now live in the common packed-refs only
    for folder in (checkout, worktree):
        settings.BASE_DIR = folder
        assert git_commit() == git("rev-parse", "HEAD", cwd=folder)
    assert git_commit() != git("rev-parse", "HEAD", cwd=checkout)  # the worktree's own branch
