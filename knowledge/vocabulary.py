"""Synonyms and protected terms in bulk: parse a file into a plan (what it adds, updates or leaves
as is, and the lines it cannot use, each with its line number), then apply the plan in one
transaction and expire the tenant's cached answers once.

Formats: synonyms as CSV (``terms,replacements,weight,active``; terms and replacements are
comma-separated inside their cell) or in Solr's synonyms format (``a, b, c`` a two-way group,
``a, b => c`` a one-way rule, ``#`` comments); protected terms as CSV (``value,kind,note``).
An import adds and updates, never deletes.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from django.core.exceptions import ValidationError
from django.db import transaction

from core.uniqueness import conflict_on
from knowledge.errors import VocabularyChanged
from knowledge.models import DictionaryTerm, Synonym
from knowledge.revisions import expire_cached_answers
from tenants.models import Tenant

SYNONYMS_CSV, SYNONYMS_SOLR, TERMS_CSV = "synonyms-csv", "synonyms-solr", "terms-csv"
FORMATS = {
    SYNONYMS_CSV: "Synonyms, CSV (terms,replacements,weight,active)",
    SYNONYMS_SOLR: "Synonyms, Solr format (a, b, c / a => b)",
    TERMS_CSV: "Protected terms, CSV (value,kind,note)",
}
# A vocabulary kept as files (a dataset's or the sample KB's): file name -> format.
VOCABULARY_FILES = {"protected-terms.csv": TERMS_CSV, "synonyms.csv": SYNONYMS_CSV}
SYNONYM_COLUMNS = ["terms", "replacements", "weight", "active"]
TERM_COLUMNS = ["value", "kind", "note"]
_TRUE, _FALSE = {"", "1", "true", "yes", "on"}, {"0", "false", "no", "off"}
_Row = TypeVar("_Row", Synonym, DictionaryTerm)


@dataclass
class Plan(Generic[_Row]):
    """What an import would do; ``errors`` are (line number, message)."""

    model: type[_Row]
    add: list[_Row] = field(default_factory=list)
    update: list[_Row] = field(default_factory=list)  # existing rows with the file's values set, unsaved
    unchanged: list[_Row] = field(default_factory=list)
    errors: list[tuple[int, str]] = field(default_factory=list)

    @property
    def changes(self) -> int:
        return len(self.add) + len(self.update)

    def create_added(self) -> None:
        self.model.objects.bulk_create(self.add)


def plan_import(tenant: Tenant, file_format: str, text: str) -> Plan[Synonym] | Plan[DictionaryTerm]:
    """Parse ``text`` and compare it with what the tenant has; nothing is written."""
    if file_format == TERMS_CSV:
        return _plan(tenant, DictionaryTerm, _csv_rows(text, TERM_COLUMNS, _term), _term_key, ["note"])
    rows = _csv_rows(text, SYNONYM_COLUMNS, _synonym) if file_format == SYNONYMS_CSV else _solr_rows(text)
    return _plan(tenant, Synonym, rows, _synonym_key, ["weight", "is_active"])


@transaction.atomic
def apply_import(tenant: Tenant, plan: Plan[Synonym] | Plan[DictionaryTerm]) -> None:
    """Write a plan without errors; cached answers of the tenant expire once, after the writes."""
    if plan.errors:
        raise ValueError("a plan with errors is not applied: fix the lines it names")
    changed = VocabularyChanged("another import added some of these terms meanwhile: preview the import again")
    with conflict_on("unique_dictionary_term", changed):
        plan.create_added()
    for row in plan.update:
        row.save()
    expire_cached_answers(tenant.pk)


def read_vocabulary_folder(folder: Path) -> dict[str, str]:
    """The ``VOCABULARY_FILES`` a folder holds: file name -> text."""
    return {name: (folder / name).read_text(encoding="utf-8") for name in VOCABULARY_FILES if (folder / name).is_file()}


@transaction.atomic
def import_vocabulary_files(tenant: Tenant, files: Mapping[str, str], where: str) -> int:
    """Add and update what ``files`` (``VOCABULARY_FILES`` name -> text) hold; a line it cannot use is a
    ``ValueError`` naming ``where``, the file and the line, and nothing is written. The changes made."""
    changes = 0
    for name, text in files.items():
        plan = plan_import(tenant, VOCABULARY_FILES[name], text)
        if plan.errors:
            lines = "; ".join(f"line {number}: {message}" for number, message in plan.errors)
            raise ValueError(f"{where}/{name}: {lines}")
        if plan.changes:
            apply_import(tenant, plan)
            changes += plan.changes
    return changes


def seed_vocabulary(tenant: Tenant, folder: Path) -> int | None:
    """A folder's vocabulary (``read_vocabulary_folder``) into a tenant that has none yet, so an admin's
    later edits outlive the next seeding: the changes made, or None when the tenant had a vocabulary."""
    if DictionaryTerm.objects.filter(tenant=tenant).exists() or Synonym.objects.filter(tenant=tenant).exists():
        return None
    return import_vocabulary_files(tenant, read_vocabulary_folder(folder), str(folder))


def export_synonyms_csv(synonyms: Iterable[Synonym]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(SYNONYM_COLUMNS)
    for synonym in synonyms:
        writer.writerow([", ".join(synonym.terms), ", ".join(synonym.replacements), synonym.weight,
                         "true" if synonym.is_active else "false"])  # fmt: skip
    return out.getvalue()


def export_synonyms_solr(synonyms: Iterable[Synonym]) -> str:
    """Solr's format has no weights nor switches: active rules only, as ``str(rule)`` writes them."""
    return "".join(f"{synonym}\n" for synonym in synonyms if synonym.is_active)


def export_terms_csv(terms: Iterable[DictionaryTerm]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(TERM_COLUMNS)
    writer.writerows([term.value, term.kind, term.note] for term in terms)
    return out.getvalue()


# --- parsing: (line number, unsaved instance or error message) ----------------------------------------


def _csv_rows(
    text: str, columns: list[str], build: Callable[[dict[str, str]], _Row | str]
) -> list[tuple[int, _Row | str]]:
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))
    missing = [name for name in columns[:1] if name not in (reader.fieldnames or [])]
    if missing:
        return [(1, f"the header must name the columns {', '.join(columns)}")]
    rows: list[tuple[int, _Row | str]] = []
    for record in reader:
        values = {name: (record.get(name) or "").strip() for name in columns}
        if any(values.values()):
            rows.append((reader.line_num, build(values)))
    return rows


def _solr_rows(text: str) -> list[tuple[int, Synonym | str]]:
    rows: list[tuple[int, Synonym | str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        terms, arrow, replacements = line.partition("=>")
        if arrow and not replacements.strip():
            rows.append((number, "a one-way rule needs replacements after =>"))
        else:
            rows.append((number, _synonym({"terms": terms, "replacements": replacements})))
    return rows


def _synonym(values: dict[str, str]) -> Synonym | str:
    replacements = _split(values["replacements"])
    active = values.get("active", "").lower()
    if active not in _TRUE | _FALSE:
        return f"active must be true or false, not {values['active']!r}"
    try:
        weight = float(values["weight"]) if values.get("weight") else Synonym._meta.get_field("weight").default
    except ValueError:
        return f"weight must be a number, not {values['weight']!r}"
    kind = Synonym.Kind.EXPLICIT if replacements else Synonym.Kind.EQUIVALENT
    return Synonym(kind=kind, terms=_split(values["terms"]), replacements=replacements, weight=weight,
                   is_active=active in _TRUE)  # fmt: skip


def _term(values: dict[str, str]) -> DictionaryTerm:
    return DictionaryTerm(value=values["value"], kind=values["kind"] or DictionaryTerm.Kind.TERM, note=values["note"])


def _split(cell: str) -> list[str]:
    return [term.strip() for term in cell.split(",") if term.strip()]


def _synonym_key(synonym: Synonym) -> tuple[object, ...]:
    return synonym.kind, tuple(sorted(synonym.terms)), tuple(sorted(synonym.replacements))


def _term_key(term: DictionaryTerm) -> tuple[object, ...]:
    return term.kind, term.value


def _plan(
    tenant: Tenant,
    model: type[_Row],
    rows: list[tuple[int, _Row | str]],
    key: Callable[[_Row], tuple[object, ...]],
    updatable: list[str],
) -> Plan[_Row]:
    plan = Plan(model)
    existing = {key(row): row for row in model.objects.filter(tenant=tenant)}
    seen: dict[tuple[object, ...], int] = {}
    for number, row in rows:
        if isinstance(row, str):
            plan.errors.append((number, row))
            continue
        row.tenant = tenant
        try:
            row.full_clean(exclude=["tenant"], validate_unique=False, validate_constraints=False)
        except ValidationError as exc:
            messages = (f"{name}: {' '.join(texts)}" for name, texts in exc.message_dict.items())
            plan.errors.append((number, "; ".join(messages)))
            continue
        if key(row) in seen:
            plan.errors.append((number, f"repeats line {seen[key(row)]}"))
            continue
        seen[key(row)] = number
        current = existing.get(key(row))
        if current is None:
            plan.add.append(row)
        elif all(getattr(current, name) == getattr(row, name) for name in updatable):
            plan.unchanged.append(current)
        else:
            for name in updatable:
                setattr(current, name, getattr(row, name))
            plan.update.append(current)
    return plan
