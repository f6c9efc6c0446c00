"""A knowledge base's query set: queries a curator judged, each with documents graded 0-2 (not
relevant, relevant, highly relevant). What the console's retrieval testing and search analytics add
to, what the API and the console import and export (the BEIR layout as a zip, or CSV), and what an
evaluation run (``retrieval.evaluation.kb_runs``) scores a version on.

A document is named by its file name (``corpus_id_from_uri`` of its source URI), as ``manage.py
evaluate --tenant`` names it, so an exported set is a folder that command reads too."""

from __future__ import annotations

import csv
import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from django.db import transaction
from django.db.models import Count, Prefetch, Q, QuerySet

from knowledge.models import KnowledgeBase
from retrieval.errors import InvalidQuerySet
from retrieval.evaluation.datasets import BeirDataset, corpus_id_from_uri
from retrieval.models import GRADES, JudgedQuery, Judgment

ORIGINS = ("console", "analytics", "import", "api")
CSV_HEADER = ["query_id", "query", "document", "grade"]
MAX_QUERY_CHARS = 2000
MAX_IMPORT_BYTES = 20 * 1024 * 1024
EXPORT_SPLIT = "test"  # the qrels file an export writes: qrels/test.tsv


@dataclass(frozen=True)
class ImportCounts:
    queries: int  # judged queries in the file
    judgments: int  # judgments written (new or regraded)

    def as_dict(self) -> dict[str, Any]:
        return {"queries": self.queries, "judgments": self.judgments}


def document_key(source_uri: str) -> str:
    """How a hit's document is named in judgments: its file name (URL-decoded, as in ``corpus_id_from_uri``)."""
    return unquote(source_uri.rsplit("/", 1)[-1])


# --- reads ----------------------------------------------------------------------------------------


def judged_queries_of(kb: KnowledgeBase) -> QuerySet[JudgedQuery]:
    """The set, each query with its judgments and the count of relevant ones (grade > 0)."""
    return (
        JudgedQuery.objects.filter(knowledge_base=kb, tenant_id=kb.tenant_id)
        .prefetch_related(Prefetch("judgments", queryset=Judgment.objects.order_by("-grade", "document")))
        .annotate(relevant=Count("judgments", filter=Q(judgments__grade__gt=0)))
        .order_by("id")
    )


def grades_for(kb: KnowledgeBase, query: str) -> dict[str, int]:
    """The documents judged for this query of the set (document -> grade); empty when it is not in it."""
    return dict(
        Judgment.objects.filter(
            judged_query__knowledge_base=kb, judged_query__tenant_id=kb.tenant_id, judged_query__query=query.strip()
        ).values_list("document", "grade")
    )


def as_dataset(kb: KnowledgeBase) -> BeirDataset:
    """The set as ``manage.py evaluate`` reads a labelled folder: queries keyed by their id, and only
    those with a relevant judgment (a query with none cannot score)."""
    queries, qrels = {}, {}
    for judged in judged_queries_of(kb):
        # read as ``run_variant`` reads a hit's source URI (``corpus_id_from_uri``), so both sides match
        grades = {corpus_id_from_uri(judgment.document): judgment.grade for judgment in judged.judgments.all()}
        if any(grade > 0 for grade in grades.values()):
            queries[str(judged.pk)] = judged.query
            qrels[str(judged.pk)] = grades
    return BeirDataset(f"{kb.name}-query-set", Path("."), EXPORT_SPLIT, "", {}, queries, qrels)


# --- writes ---------------------------------------------------------------------------------------


def _clean_query(query: str) -> str:
    text = " ".join(str(query).split())
    if not text:
        raise InvalidQuerySet("a judged query needs a text", details={"field": "query"})
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidQuerySet(f"a judged query has at most {MAX_QUERY_CHARS} characters", details={"field": "query"})
    return text


def add_query(kb: KnowledgeBase, query: str, origin: str) -> tuple[JudgedQuery, bool]:
    """Put a query in the set (a no-op when it is there); True when it is new."""
    return JudgedQuery.objects.get_or_create(
        knowledge_base=kb, tenant_id=kb.tenant_id, query=_clean_query(query), defaults={"origin": origin}
    )


def judge(kb: KnowledgeBase, query: str, grades: dict[str, int], origin: str) -> JudgedQuery:
    """Grade documents for a query, adding the query to the set if needed; a later grade replaces an
    earlier one of the same document."""
    for document, grade in grades.items():
        if grade not in GRADES:
            raise InvalidQuerySet(f"a grade is 0, 1 or 2, not {grade!r}", details={"field": "grade"})
        if not str(document).strip() or len(str(document)) > 1000:
            raise InvalidQuerySet("a judged document needs a name of 1-1000 characters", details={"field": "document"})
    with transaction.atomic():
        judged, _ = add_query(kb, query, origin)
        for document, grade in grades.items():
            Judgment.objects.update_or_create(
                judged_query=judged, document=str(document).strip(), defaults={"grade": grade}
            )
    return judged


def remove_query(kb: KnowledgeBase, query_id: int) -> bool:
    deleted, _ = JudgedQuery.objects.filter(knowledge_base=kb, tenant_id=kb.tenant_id, pk=query_id).delete()
    return bool(deleted)


# --- export ---------------------------------------------------------------------------------------


def export_csv(kb: KnowledgeBase) -> str:
    """One row per judgment (a query without any: one row with an empty document)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_HEADER)
    for judged in judged_queries_of(kb):
        rows = judged.judgments.all() or [None]
        for judgment in rows:
            writer.writerow(
                [judged.pk, judged.query, judgment.document if judgment else "", judgment.grade if judgment else ""]
            )
    return out.getvalue()


def export_beir(kb: KnowledgeBase) -> bytes:
    """A zip of ``queries.jsonl`` and ``qrels/test.tsv`` (with BEIR's header line)."""
    queries, qrels = io.StringIO(), io.StringIO()
    qrels.write("query-id\tcorpus-id\tscore\n")
    for judged in judged_queries_of(kb):
        queries.write(json.dumps({"_id": str(judged.pk), "text": judged.query}, ensure_ascii=False) + "\n")
        for judgment in judged.judgments.all():
            qrels.write(f"{judged.pk}\t{judgment.document}\t{judgment.grade}\n")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("queries.jsonl", queries.getvalue())
        archive.writestr(f"qrels/{EXPORT_SPLIT}.tsv", qrels.getvalue())
    return buffer.getvalue()


# --- import ---------------------------------------------------------------------------------------


def _grade(value: str, where: str) -> int:
    try:
        grade = int(str(value).strip())
    except ValueError:
        raise InvalidQuerySet(f"{where}: the grade {value!r} is not a number", details={"field": "grade"}) from None
    return min(max(grade, 0), 2)  # BEIR sets grade up to 2 (TREC-COVID); negatives mean "judged not relevant"


def parse_csv(text: str) -> dict[str, dict[str, int]]:
    """query text -> {document: grade}; the header names the columns (``query``, ``document``, ``grade``;
    ``query_id`` is optional and ignored)."""
    reader = csv.DictReader(io.StringIO(text))
    missing = {"query", "document", "grade"} - set(reader.fieldnames or [])
    if missing:
        raise InvalidQuerySet(
            f"the CSV needs the columns query, document and grade (missing: {', '.join(sorted(missing))})",
            details={"columns": sorted(missing)},
        )
    judged: dict[str, dict[str, int]] = {}
    for line, row in enumerate(reader, start=2):
        query = (row.get("query") or "").strip()
        if not query:
            continue
        grades = judged.setdefault(query, {})
        document = (row.get("document") or "").strip()
        if document:
            grades[document] = _grade(row.get("grade") or "", f"line {line}")
    return judged


def parse_beir(archive: zipfile.ZipFile) -> dict[str, dict[str, int]]:
    """query text -> {document: grade} from ``queries.jsonl`` and every ``qrels/*.tsv`` in the zip (at
    its top or in one folder); a judgment of a query id without a text is skipped."""
    names = archive.namelist()
    queries_file = next((name for name in names if name.rsplit("/", 1)[-1] == "queries.jsonl"), None)
    qrels_files = [name for name in names if "/qrels/" in f"/{name}" and name.endswith(".tsv")]
    if queries_file is None or not qrels_files:
        raise InvalidQuerySet(
            "a BEIR zip holds queries.jsonl and qrels/<split>.tsv", details={"files": sorted(names)[:20]}
        )
    texts: dict[str, str] = {}
    for number, line in enumerate(archive.read(queries_file).decode("utf-8-sig").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            texts[str(row["_id"])] = str(row["text"])
        except (ValueError, KeyError, TypeError):
            raise InvalidQuerySet(
                f"queries.jsonl line {number}: expected an object with _id and text", details={"line": number}
            ) from None
    judged: dict[str, dict[str, int]] = {}
    for name in qrels_files:
        for number, line in enumerate(archive.read(name).decode("utf-8-sig").splitlines(), start=1):
            fields = line.rstrip("\r").split("\t")
            if len(fields) < 3 or fields[0] == "query-id" or fields[0] not in texts:
                continue
            judged.setdefault(texts[fields[0]], {})[fields[1]] = _grade(fields[2], f"{name} line {number}")
    return judged


def import_query_set(kb: KnowledgeBase, filename: str, content: bytes) -> ImportCounts:
    """Merge a file into the set: a ``.zip`` in the BEIR layout or a ``.csv``; queries already in the set
    keep their other judgments, and a document graded again takes the file's grade. All or nothing."""
    if len(content) > MAX_IMPORT_BYTES:
        raise InvalidQuerySet(f"a query set file has at most {MAX_IMPORT_BYTES} bytes", details={"bytes": len(content)})
    name = filename.lower()
    try:
        if name.endswith(".zip"):
            with zipfile.ZipFile(io.BytesIO(content)) as archive:
                judged = parse_beir(archive)
        elif name.endswith(".csv"):
            judged = parse_csv(content.decode("utf-8-sig"))
        else:
            raise InvalidQuerySet(
                "import a .zip (BEIR: queries.jsonl + qrels/*.tsv) or a .csv", details={"filename": filename}
            )
    except (zipfile.BadZipFile, UnicodeDecodeError, csv.Error) as exc:
        raise InvalidQuerySet(f"unreadable query set file: {exc}", details={"filename": filename}) from None
    with transaction.atomic():
        for query, grades in judged.items():
            judge(kb, query, grades, "import")
    return ImportCounts(len(judged), sum(len(grades) for grades in judged.values()))
