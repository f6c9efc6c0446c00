"""Comparing two reports, and the commit a report names."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from retrieval.evaluation.reports import compare_reports, git_commit


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
