"""Every default the docs, docstrings and the OpenAPI schema state is the code's.

A default is stated in one of a few forms, which these tests find wherever they appear (the convention,
docs/development.md "How the docs state a default"):

- a setting with its value: ``SETTING (value)``, ``SETTING (default value)`` or ``SETTING, default value``,
  with or without backticks, the value a number (``1,000``, or with a unit: ``2 s``, ``256 KiB``), ``true``
  / ``false`` or a code span: checked against the ``Environment`` field (docs/configuration.md's tables
  are checked by tests/retrieval_site/test_settings.py);
- a search option's value named the default: ``minmax`` (the default), ``"minmax", the default``, ``the
  default `minmax` `` or ``default: the KB's, else `minmax` ``: checked against ``retrieval.tuning``;
- the request body's table in docs/api.md: each field's ``default ...``, checked against the serializer's
  default or ``retrieval.tuning.service_defaults``.

History says when: "(the default until ...)", "(the default before ...)" and "the default of then" are
not statements of today's default.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from drf_spectacular.generators import SchemaGenerator
from rest_framework.fields import empty

from retrieval import tuning
from retrieval.serializers import AGGREGATES, FUSIONS, GROUP_BY, LEG_CANDIDATES, LEG_WEIGHTS, ModeSearchInput
from retrieval_site.settings.environment import Environment

ROOT = Path(__file__).resolve().parent.parent
USER_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
CODE = sorted(path for package in ("retrieval", "knowledge", "engines", "tenants", "core") for path in (ROOT / package).rglob("*.py") if "migrations" not in path.parts)  # fmt: skip


def where(path: Path) -> str:
    return str(path.relative_to(ROOT))


# --- settings stated with their value -----------------------------------------------------------------

VALUE = r"(`[^`\n]+`|-?[0-9][0-9,]*(?:\.[0-9]+)?(?: ?(?:ms|s|h|min|KiB|MiB|B)\b)?|true|false)"
SETTING_STATED = re.compile(
    rf"`?\b([A-Z][A-Z0-9_]{{2,}})\b`?(?: \({VALUE}\)| \((?:the )?default:? {VALUE}\)|, default:? {VALUE}(?![\w.]))"
)
UNITS = {"ms": 0.001, "s": 1, "min": 60, "h": 3600, "B": 1, "KiB": 1024, "MiB": 1024**2}
SETTING_UNITS = {"_MS": 0.001, "_S": 1, "_BYTES": 1}  # the unit of a setting named ..._MS, ..._S, ..._BYTES


def environment_defaults() -> dict[str, object]:
    """Each variable's default where it is a plain value (not computed, not empty)."""
    fields = {field.validation_alias or name: field for name, field in Environment.model_fields.items()}
    return {
        name: field.default
        for name, field in fields.items()
        if field.default_factory is None and isinstance(field.default, (bool, int, float, str)) and field.default != ""
    }


def stated_value(stated: str, setting: str) -> object:
    """A value as the docs state it, in the setting's own unit."""
    if stated.startswith("`"):
        return stated.strip("`")
    if stated in ("true", "false"):
        return stated == "true"
    number, _, unit = stated.replace(",", "").partition(" ")
    if number[-1].isalpha():  # "2s"
        number, unit = re.match(r"([0-9.\-]+)(\w*)", number).groups()
    value = float(number)
    if unit:
        own = next((factor for suffix, factor in SETTING_UNITS.items() if setting.endswith(suffix)), None)
        assert own is not None, f"{setting} is stated with a unit ({stated}) but has none"
        value = value * UNITS[unit] / own
    return value


def settings_stated(text: str) -> list[tuple[str, str, int]]:
    """(setting, value as stated, line) of each setting stated with its value in ``text``."""
    return [
        (match.group(1), next(group for group in match.groups()[1:] if group), text.count("\n", 0, match.start()) + 1)
        for match in SETTING_STATED.finditer(text)
    ]


def wrong_settings(text: str, where: str) -> list[str]:
    defaults = environment_defaults()
    wrong = []
    for setting, stated, line in settings_stated(text):
        if setting not in defaults:
            continue
        default = defaults[setting]
        value = stated_value(stated, setting)
        if isinstance(value, float) and not isinstance(default, bool):
            matches = isinstance(default, (int, float)) and value == pytest.approx(float(default))
        else:
            matches = value == default
        if not matches:
            wrong.append(f"{where}:{line}: {setting} stated as {stated}, the code's default is {default!r}")
    return wrong


def test_the_pattern_reads_the_forms_of_the_convention():
    text = (
        "`GRAPH_HOPS` (2), SEARCH_WEIGHT_GRAPH_HYBRID (0.1), `SEARCH_DEADLINE_MS` (2 s), `OCR_LANGUAGES` "
        "(`chi_sim+eng`), `EMBEDDING_BACKEND` (default `onnx`), `VECTOR_EXACT_SCAN_THRESHOLD`, default 8000 "
        "in an index, `GRAPH_HUB_PASSAGES` (1,000), `MAX_REQUEST_BYTES` (256 KiB), `GRAPH_HOPS` (3)"
    )
    assert [setting for setting, _, _ in settings_stated(text)] == [
        "GRAPH_HOPS", "SEARCH_WEIGHT_GRAPH_HYBRID", "SEARCH_DEADLINE_MS", "OCR_LANGUAGES", "EMBEDDING_BACKEND",
        "VECTOR_EXACT_SCAN_THRESHOLD", "GRAPH_HUB_PASSAGES", "MAX_REQUEST_BYTES", "GRAPH_HOPS",
    ]  # fmt: skip
    assert wrong_settings(text, "example") == ["example:1: GRAPH_HOPS stated as 3, the code's default is 2"]
    assert wrong_settings("`GRAPH_HOPS` (2 hops at most)", "example") == []  # not a bare value: not a default


def test_settings_stated_with_a_value_state_the_codes_default():
    wrong = [
        line for path in USER_DOCS + CODE for line in wrong_settings(path.read_text(encoding="utf-8"), where(path))
    ]
    assert wrong == []


def test_the_docs_state_settings_defaults_in_the_convention():
    """The convention is in use: were the docs rephrased past the pattern, the test above would pass empty."""
    stated = {setting for path in USER_DOCS for setting, _, _ in settings_stated(path.read_text(encoding="utf-8"))}
    assert len(stated & set(environment_defaults())) >= 20


# --- search options named the default -----------------------------------------------------------------

OPTIONS = {"fusion": FUSIONS, "leg_weights": LEG_WEIGHTS, "leg_candidates": LEG_CANDIDATES, "aggregate": AGGREGATES, "group_by": GROUP_BY}  # fmt: skip
QUOTED = r"""(?:``|`|"|')(\w+)(?:``|`|"|')"""
NOT_TODAY = r"(?! until| before| of then| then| is)"
OPTION_STATED = [
    re.compile(QUOTED + rf"\s*\((?:the |its )?default\b{NOT_TODAY}(?!: the KB)"),  # `minmax` (the default)
    re.compile(QUOTED + rf",\s*the default\b{NOT_TODAY}"),  # "minmax", the default
    re.compile(r"\b(?:the |by )?default(?: is| fusion)?:?\s+" + QUOTED),  # the default `minmax`
    re.compile(r"default: the KB's(?: search settings)?, else (?:``|`|\"|')?(\w+)"),  # default: the KB's, else minmax
]


def option_of(value: str) -> str | None:
    return next((option for option, choices in OPTIONS.items() if value in choices), None)


def wrong_options(text: str, where: str) -> list[str]:
    defaults = tuning.service_defaults("hybrid")
    wrong = []
    for pattern in OPTION_STATED:
        for match in pattern.finditer(text):
            option = option_of(match.group(1))
            if option and defaults[option] != match.group(1):
                line = text.count("\n", 0, match.start()) + 1
                wrong.append(f"{where}:{line}: {match.group(0)!r}: the default {option} is {defaults[option]!r}")
    return wrong


def test_the_option_patterns_read_the_forms_of_the_convention():
    defaults = tuning.service_defaults("hybrid")
    other = {
        option: next(value for value in choices if value != defaults[option]) for option, choices in OPTIONS.items()
    }
    fusion, legs, weights, aggregate = (
        other["fusion"],
        other["leg_candidates"],
        other["leg_weights"],
        other["aggregate"],
    )
    text = f'`{fusion}` (the default), "{legs}", the default, the default `{weights}`, default: the KB\'s, else `{aggregate}`'
    assert wrong_options(text, "x") == [
        f"x:1: '`{fusion}` (the default': the default fusion is {defaults['fusion']!r}",
        f"x:1: '\"{legs}\", the default': the default leg_candidates is {defaults['leg_candidates']!r}",
        f"x:1: 'the default `{weights}`': the default leg_weights is {defaults['leg_weights']!r}",
        f'x:1: "default: the KB\'s, else `{aggregate}": the default aggregate is {defaults["aggregate"]!r}',
    ]
    assert wrong_options(f"`{fusion}` (the default until 2026-12-02), `{defaults['fusion']}` (the default)", "x") == []


def test_options_named_the_default_are_the_codes():
    wrong = [line for path in USER_DOCS + CODE for line in wrong_options(path.read_text(encoding="utf-8"), where(path))]
    assert wrong == []


# --- the OpenAPI schema -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def schema() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)


def test_the_schema_states_the_codes_defaults(schema):
    text = json.dumps(schema, ensure_ascii=False)
    assert wrong_options(text, "schema") == [] and wrong_settings(text, "schema") == []
    body = schema["components"]["schemas"]["SearchInput"]["properties"]
    defaults = tuning.service_defaults("hybrid")
    for option in OPTIONS:
        assert re.search(r"default: the KB's, else (\w+)", body[option]["description"]).group(1) == defaults[option]
    hybrid = schema["paths"]["/api/v1/retrieval/hybrid"]["post"]["summary"]
    assert f"else {tuning.DEFAULT_FUSION}" in hybrid


def on_the_default_fusions_scale(hit: dict, weights: dict) -> bool:
    """Whether a fused hybrid hit's score could come from the default fusion: RRF's sum of w / (k + rank)
    is below 2 / 61 for two legs at k 60, a sum of scores scaled to 0-1 (``minmax``, ``relevance``) lies
    between the best leg's weight and all of them when the hit heads a list."""
    legs = [weights[leg] for leg in hit["retrievers"]]
    if tuning.DEFAULT_FUSION == "rrf":
        ceiling = sum(weight / (environment_defaults()["RRF_K"] + 1) for weight in legs)
        return ceiling / 2 < hit["score"] <= ceiling
    return max(legs) <= hit["score"] <= sum(legs)


def test_the_example_answers_are_on_the_default_fusions_scale(schema):
    """The README's response and the schema's hybrid example show a score as today's fusion makes it."""
    from tests.test_docs import documented_response

    readme = documented_response()
    assert on_the_default_fusions_scale(readme["results"][0], readme["weights"])
    example = schema["paths"]["/api/v1/retrieval/hybrid"]["post"]["responses"]["200"]["content"]["application/json"]
    [answer] = [value["value"] for value in example["examples"].values() if value["value"]["mode"] == "hybrid"][:1]
    assert on_the_default_fusions_scale(answer["results"][0], answer["weights"])
    assert answer["results"][0]["fused_score"] == answer["results"][0]["score"]


# --- docs/api.md's request body -----------------------------------------------------------------------

API = ROOT / "docs" / "api.md"
BODY_DEFAULT = re.compile(r"default(?::? the KB's(?: search settings)?, else|:|) (`[^`]+`(?: \(([^)]+)\))?|[\w.\-]+)")


def body_defaults() -> dict[str, object]:
    """What a search does with a field left out: the serializer's default, else the service's."""
    fields = ModeSearchInput().fields
    stated = {name: field.default for name, field in fields.items() if field.default is not empty}
    service = tuning.service_defaults("hybrid")
    stated.update({name: value for name, value in service.items() if name in fields})
    stated["hops"] = environment_defaults()["GRAPH_HOPS"]
    return stated


def test_the_api_body_table_states_the_codes_defaults():
    block = API.read_text(encoding="utf-8").split("| field | type | |", 1)[1].split("\n\n", 1)[0]
    defaults, checked, wrong = body_defaults(), 0, []
    for row in block.splitlines()[2:]:
        field, description = re.match(r"\| `(\w+)` \|[^|]*\| (.*) \|$", row).groups()
        match = BODY_DEFAULT.search(description)
        if field not in defaults or not match:
            continue
        stated = match.group(2) or match.group(1).strip("`")
        if re.fullmatch(r"[A-Z][A-Z0-9_]+", stated):
            continue  # a setting's name without its value: true whatever the value
        default = defaults[field]
        checked += 1
        if isinstance(default, dict):  # weights: "1.0 each" of the two-way legs
            right = all(float(stated) == default[leg] for leg in ("vector", "bm25"))
        elif isinstance(default, bool):
            right = stated == str(default).lower()
        elif isinstance(default, (int, float)):
            right = re.fullmatch(r"[0-9.]+", stated) is not None and float(stated) == default
        else:
            right = stated == default
        if not right:
            wrong.append(f"{field}: stated {stated!r}, the code's default is {default!r}")
    assert wrong == []
    assert checked >= 12  # the table's shape still lets this test read it
