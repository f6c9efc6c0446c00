"""Reading a BEIR-layout folder, and the corpus ids behind the file names it is ingested as."""

import pytest

from retrieval.evaluation.datasets import corpus_id_from_uri, doc_filename, load_dataset
from tests.retrieval.evaluation.conftest import write_beir


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
