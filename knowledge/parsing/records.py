"""Records: FAQ tables (CSV / JSONL question-answer pairs) and general tables (CSV, XLSX) whose every
row becomes one line that keeps its column headers ("Price: 12 | Stock: 3"), chunked by whole rows."""

from __future__ import annotations

import csv
import datetime
import io
import json
import zipfile
from collections.abc import Iterable, Sequence
from typing import Any

import openpyxl

from knowledge.parsing.base import ParseError, ParseReport, Section, clean_text, decode, describe

_QUESTION_KEYS = {"question", "q", "问题", "问"}
_ANSWER_KEYS = {"answer", "a", "答案", "答", "回答"}


def _match_key(keys: list[str], aliases: set[str]) -> str | None:
    return next((key for key in keys if clean_text(key).casefold() in aliases), None)


def _faq_section(question: str, answer: str, where: str, metadata: dict[str, Any]) -> Section | None:
    """One question/answer section; None for a blank entry, ParseError for a half-filled one."""
    question, answer = clean_text(question), clean_text(answer)
    if not question and not answer:
        return None
    if not answer:
        raise ParseError(f"FAQ {where} has no answer")
    if not question:
        raise ParseError(f"FAQ {where} has no question")
    return Section(f"{question}\n{answer}", {**metadata, "question": question})


# --- general tables -----------------------------------------------------------------------


def _cell_text(value: object) -> str:
    """One cell on one line: a row is one record, so line breaks inside a cell become spaces."""
    if value is None:
        return ""
    if isinstance(value, datetime.datetime) and value.time() == datetime.time():
        value = value.date()
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return " ".join(clean_text(str(value)).split())


def table_records(
    rows: Iterable[tuple[int, Sequence[object]]],
    sheet: str,
    report: ParseReport,
    metadata: dict[str, Any] | None = None,
) -> Section | None:
    """A table's rows (numbered as the file numbers them) as one rows-section: the first non-blank row is
    the header, each later row one "Header: value | ..." line (blank cells left out). Columns without a
    header are named by their letter position ("Column 3"). None when there is no data row."""
    header: list[str] | None = None
    lines: list[str] = []
    numbers: list[int] = []
    for number, values in rows:
        cells = [_cell_text(value) for value in values]
        if not any(cells):
            continue
        if header is None:
            header = cells
            continue
        names = header + [""] * (len(cells) - len(header))
        fields = [
            f"{name or f'Column {column}'}: {cell}"
            for column, (name, cell) in enumerate(zip(names, cells, strict=False), start=1)
            if cell
        ]
        lines.append(" | ".join(fields))
        numbers.append(number)
    where = f"sheet {sheet!r}" if sheet else "the table"
    if not lines:
        report.warnings.append(f"{where} has no data rows")
        return None
    report.rows += len(lines)
    located = {"sheet": sheet, "section": sheet} if sheet else {}
    return Section("\n".join(lines), {**located, **(metadata or {})}, rows=tuple(numbers))


def parse_xlsx(raw: bytes, report: ParseReport) -> tuple[str, list[Section]]:
    """Every visible sheet as a table; formulas are read as their last computed values."""
    if not zipfile.is_zipfile(io.BytesIO(raw)):
        raise ParseError("could not read XLSX: the file is not a .xlsx (zip) package")
    try:
        workbook = openpyxl.load_workbook(io.BytesIO(raw), read_only=True, data_only=True)
    except Exception as exc:  # openpyxl/zipfile/lxml raise assorted types on damaged packages
        raise ParseError(f"could not read XLSX: {describe(exc)}") from exc
    try:
        title = clean_text(workbook.properties.title or "")
        sections = []
        for sheet in workbook.worksheets:
            report.sheets += 1
            if getattr(sheet, "sheet_state", "visible") != "visible":
                report.warnings.append(f"sheet {sheet.title!r} is hidden and was not read")
                continue
            rows = ((number, list(row)) for number, row in enumerate(sheet.iter_rows(values_only=True), start=1))
            if (section := table_records(rows, clean_text(sheet.title), report)) is not None:
                sections.append(section)
    finally:
        workbook.close()
    return title, sections


def parse_csv(raw: bytes, report: ParseReport) -> tuple[str, list[Section]]:
    """An FAQ when it has a question column and an answer column (each row one pair), else a table."""
    try:
        rows = list(csv.reader(io.StringIO(decode(raw), newline="")))
    except csv.Error as exc:
        raise ParseError(f"could not read CSV: {describe(exc)}") from exc
    if not rows:
        return "", []
    header = [name.strip() for name in rows[0]]
    question_col = _match_key(header, _QUESTION_KEYS)
    answer_col = _match_key(header, _ANSWER_KEYS)
    if question_col is None or answer_col is None:
        report.doc_type = "csv"
        section = table_records(enumerate(rows, start=1), "", report)
        return "", [section] if section is not None else []
    sections = []
    for number, row in enumerate(rows[1:], start=1):
        values = dict(zip(header, (cell.strip() for cell in row)))
        extra = {name: value for name, value in values.items() if name and name not in (question_col, answer_col)}
        section = _faq_section(
            values.get(question_col, ""), values.get(answer_col, ""), f"row {number}", {**extra, "row": number}
        )
        if section is not None:
            sections.append(section)
    return "", sections


def _json_scalar(value: object) -> bool:
    return isinstance(value, (str, int, float, bool))


def parse_jsonl(raw: bytes, report: ParseReport) -> tuple[str, list[Section]]:
    sections = []
    # Not splitlines(): JSON strings may hold raw U+2028/U+2029, which it would treat as breaks.
    for number, line in enumerate(decode(raw).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ParseError(f"line {number} is not valid JSON: {exc.msg} (column {exc.colno})") from exc
        if not isinstance(entry, dict):
            raise ParseError(f"line {number} is not a JSON object")
        question_key = _match_key(list(entry), _QUESTION_KEYS)
        answer_key = _match_key(list(entry), _ANSWER_KEYS)
        if question_key is None and answer_key is None:
            found = ", ".join(entry) or "none"
            raise ParseError(f"FAQ line {number} needs a question key and an answer key; found keys: {found}")
        question, answer = entry.get(question_key), entry.get(answer_key)
        for role, value in (("question", question), ("answer", answer)):
            if value is not None and not _json_scalar(value):
                raise ParseError(f"FAQ line {number}: the {role} must be text")
        extra = {
            key: value for key, value in entry.items() if key not in (question_key, answer_key) and _json_scalar(value)
        }
        section = _faq_section(
            "" if question is None else str(question),
            "" if answer is None else str(answer),
            f"line {number}",
            {**extra, "line": number},
        )
        if section is not None:
            sections.append(section)
    return "", sections
