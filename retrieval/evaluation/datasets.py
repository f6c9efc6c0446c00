"""BEIR-layout datasets: reading a folder's corpus, queries and judgments (and the curated vocabulary a
folder may ship in ``vocabulary/``, in the console's import formats), and writing its corpus as files
to ingest."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from django.conf import settings

from knowledge.ingestion.files import SIDECAR_SUFFIX, SourceFile, discover_files
from knowledge.vocabulary import read_vocabulary_folder
from retrieval.evaluation.metrics import Judgments

DOC_SUFFIX = ".txt"
# How the corpus is written as files (2: titles in sidecars, not in the text); part of the KB's name.
CORPUS_LAYOUT = "2"
# A dataset's curated vocabulary (``knowledge.vocabulary.VOCABULARY_FILES``): what an admin of that KB would keep.
VOCABULARY_FOLDER = "vocabulary"


@dataclass
class BeirDataset:
    """``corpus.jsonl``, ``queries.jsonl`` and one ``qrels/<split>.tsv`` of a BEIR-layout folder."""

    name: str
    path: Path
    split: str
    corpus_sha256: str
    corpus: dict[str, tuple[str, str]]  # id -> (title, text)
    queries: dict[str, str]
    qrels: dict[str, Judgments]  # only queries that have a text and at least one positive judgment
    vocabulary: dict[str, str] = field(default_factory=dict)  # file name -> text, from ``vocabulary/``

    @property
    def vocabulary_sha256(self) -> str:
        """The digest of the curated vocabulary the dataset ships (empty: none)."""
        if not self.vocabulary:
            return ""
        return hashlib.sha256(json.dumps(self.vocabulary, sort_keys=True).encode()).hexdigest()

    @property
    def missing_judged_docs(self) -> int:
        """Positive judgments that name a document absent from the corpus (they still count as relevant)."""
        return sum(
            1 for judged in self.qrels.values() for doc, grade in judged.items() if grade > 0 and doc not in self.corpus
        )


def _read_jsonl(path: Path) -> Iterable[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def read_qrels(path: Path) -> dict[str, Judgments]:
    """``query-id corpus-id score`` rows, tab separated, with or without the header line."""
    qrels: dict[str, Judgments] = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 3 or fields[0] == "query-id":
                continue
            qrels.setdefault(fields[0], {})[fields[1]] = int(fields[2])
    return qrels


def load_dataset(path: Path, split: str, *, with_corpus: bool = True) -> BeirDataset:
    """``with_corpus=False``: the labelled queries of a KB that already holds the documents (no
    ``corpus.jsonl``); each judgment's corpus id names a document by its file name or source URI
    and is read as :func:`corpus_id_from_uri` reads a hit's, so both sides match."""
    path = Path(path)
    corpus_path, qrels_path = path / "corpus.jsonl", path / "qrels" / f"{split}.tsv"
    for required in ([corpus_path] if with_corpus else []) + [path / "queries.jsonl", qrels_path]:
        if not required.is_file():
            raise FileNotFoundError(f"not a BEIR dataset folder: {required} is missing")
    digest = hashlib.sha256()
    corpus = {}
    if with_corpus:
        with open(corpus_path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        corpus = {str(row["_id"]): (row.get("title") or "", row.get("text") or "") for row in _read_jsonl(corpus_path)}
    queries = {str(row["_id"]): row["text"] for row in _read_jsonl(path / "queries.jsonl")}
    qrels = {
        qid: judged if with_corpus else {corpus_id_from_uri(doc): grade for doc, grade in judged.items()}
        for qid, judged in read_qrels(qrels_path).items()
        if queries.get(qid, "").strip() and any(grade > 0 for grade in judged.values())
    }
    corpus_sha256 = digest.hexdigest() if with_corpus else ""
    vocabulary = read_vocabulary_folder(path / VOCABULARY_FOLDER) if with_corpus else {}
    return BeirDataset(path.resolve().name, path, split, corpus_sha256, corpus, queries, qrels, vocabulary)


# --- the evaluation corpus as files ------------------------------------------------------------------


def doc_filename(corpus_id: str) -> str:
    """A reversible, path-safe file name: percent-encoding that also encodes dots (no ``..``)."""
    return quote(corpus_id, safe="").replace(".", "%2E") + DOC_SUFFIX


def corpus_id_from_uri(source_uri: str) -> str:
    """Back from ``Document.source_uri`` (``<folder>/<file name>``) to the corpus id."""
    return unquote(source_uri.rsplit("/", 1)[-1].removesuffix(DOC_SUFFIX))


def corpus_folder(dataset: BeirDataset) -> Path:
    """``var/eval/<dataset>-<hash8>-<layout>/``, one ``.txt`` of text per corpus document, its title in
    a ``.meta.json`` sidecar (the document's title, as a user would label it). Written once into a
    temporary folder and renamed, so a folder that exists is complete."""
    folder = Path(settings.VAR_DIR) / "eval" / f"{dataset.name}-{dataset.corpus_sha256[:8]}-{CORPUS_LAYOUT}"
    if folder.is_dir():
        return folder
    staging = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    staging.mkdir(parents=True)
    for corpus_id, (title, text) in dataset.corpus.items():
        path = staging / doc_filename(corpus_id)
        path.write_text(text, encoding="utf-8")
        if title.strip():
            sidecar = path.with_name(path.name + SIDECAR_SUFFIX)
            sidecar.write_text(json.dumps({"title": title.strip()}, ensure_ascii=False), encoding="utf-8")
    staging.rename(folder)
    return folder


def corpus_files(dataset: BeirDataset) -> list[SourceFile]:
    return discover_files([corpus_folder(dataset)])
