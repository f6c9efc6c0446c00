"""``bench.harness.postgres`` and ``bench.harness.http``'s stage profile: what they read of PostgreSQL's plans and of the API's responses
(no timing is asserted, only which statements and stages are read and how they are summed up)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.filtered_scale import peers
from bench.filtered_scale import report as filtered_scale_report
from bench.filtered_scale.rows import load_rows
from bench.harness import postgres
from bench.harness.http import StageProfile

OUTSIDE = StageProfile.OUTSIDE


def _response(total: float, path: dict) -> dict:
    return {"timings_ms": {"total": total, "embed": 99.0}, "critical_path_ms": path}


def test_the_stage_profile_gives_each_stage_its_median_and_the_client_time_outside_the_pipeline():
    profile = StageProfile()
    profile.add("vector | none", 0.030, _response(20.0, {"embed": 8.0, "vector": 6.0, "rest": 6.0}))
    profile.add("vector | none", 0.050, _response(41.0, {"embed": 10.0, "vector": 25.0, "rest": 6.0}))
    profile.add("vector | none", 0.024, _response(18.0, {"embed": 9.0, "vector": 4.0, "rest": 5.0}))
    profile.add("bm25 | none", 0.010, _response(7.0, {"bm25": 5.0, "rest": 2.0}))
    assert profile.summary() == {
        "vector | none": {OUTSIDE: 9.0, "embed": 9.0, "vector": 6.0, "rest": 6.0},
        "bm25 | none": {OUTSIDE: 3.0, "bm25": 5.0, "rest": 2.0},
    }


def test_the_time_table_puts_each_filter_s_stages_sql_and_peers_in_one_row():
    filters = ["none", "campaign 1 %", "nothing matches"]
    result = {
        "http": {
            "scenarios": {
                "vector | none": {"p50_ms": 25.04},
                "vector | campaign 1 %": {"p50_ms": 40.0},
                "vector | nothing matches": {"p50_ms": 17.0},
            },
            "stages": {
                "vector | none": {OUTSIDE: 7.0, "embed": 9.0, "vector": 6.0},
                "vector | campaign 1 %": {OUTSIDE: 7.5, "embed": 9.5, "vector": 20.0, "count": 1.25},
                "vector | nothing matches": {OUTSIDE: 7.0, "embed": 9.0, "vector": 1.0},
            },
        },
        "statement_times": {
            "none": {"call_ms": 6.8, "planning_ms": 0.2, "execution_ms": 5.0, "outside_sql_ms": 1.6},
            "campaign 1 %": {"call_ms": 21.0, "planning_ms": 0.3, "execution_ms": 19.0, "outside_sql_ms": 1.7},
        },
        "peers": {
            "faiss": {
                "engine": "FAISS",
                "none": {"p50_ms": 0.6},
                "campaign 1 %": {"p50_ms": 6.0},
                "nothing matches": {"p50_ms": 0.05},
            },
            "qdrant": {"skipped": "too many rows"},
        },
    }
    table = [line for line in filtered_scale_report._time_lines(result, filters) if line.startswith("|")]
    assert [cell.strip() for cell in table[0].strip("|").split("|")] == [
        "filter",
        "HTTP vector p50",
        OUTSIDE,
        "embed",
        "vector",
        "count",
        "engine call",
        "SQL planning",
        "SQL execution",
        "engine outside SQL",
        "FAISS p50",
    ]
    assert table[2] == "| none | 25.0 | 7.0 | 9.0 | 6.0 | - | 6.8 | 0.20 | 5.0 | 1.6 | 0.60 |"
    assert table[3] == "| campaign 1 % | 40.0 | 7.5 | 9.5 | 20.0 | 1.2 | 21.0 | 0.30 | 19.0 | 1.7 | 6.00 |"
    assert table[4] == "| nothing matches | 17.0 | 7.0 | 9.0 | 1.0 | - | - | - | - | - | 0.05 |"  # no statement ran
    assert filtered_scale_report._time_lines({"http": result["http"]}, filters) == []  # no SQL profile: no table


@pytest.mark.django_db
def test_the_service_path_runs_only_the_nearest_rows_statement_and_rows_touched_reads_the_count_too():
    """1,000 rows by the bench's COPY (documents 145-154 straddle the date range's end): the exact scan
    and the count each return every matching row."""
    from engines.base import SearchScope
    from engines.pgvector_index import PgVectorIndex
    from knowledge.models import Chunk
    from retrieval.filters import compile_filters
    from tests.factories import KnowledgeBaseFactory

    kb = KnowledgeBaseFactory()
    vectors = np.random.default_rng(7).standard_normal((1_000, 8)).astype(np.float32)
    load_rows(kb, [f"passage {i}" for i in range(1_000)], vectors, 14_500)
    date_range = next(flt for flt in peers.FILTERS if flt.name.startswith("date range"))
    matching = int(date_range.mask(peers.Fields.of(np.arange(14_500, 15_500))).sum())
    assert 0 < matching < 1_000
    scope = SearchScope(tenant_id=kb.tenant_id, version_ids=(kb.active_version.pk,), embedding_dim=8)
    engine, spec = PgVectorIndex(Chunk._meta.db_table), compile_filters(date_range.service)

    touched = postgres.rows_touched(engine, scope, spec, vectors[0], 10)
    assert [(s["statement"], s["rows_scanned"]) for s in touched["statements"]] == [
        ("count", matching),
        ("nearest", matching),
    ]
    assert touched["buffers"] == sum(s["buffers"] for s in touched["statements"]) > 0

    told = postgres._statements(engine, scope, spec, vectors[0], 10, plan=matching)
    assert len(told) == 1 and "<=>" in told[0][1] and told[0][0].startswith("SELECT set_config")
    times = postgres.statement_times(engine, scope, spec, vectors[:3], 10, matching)
    assert set(times) == {"call_ms", "planning_ms", "execution_ms", "outside_sql_ms"}
    assert times["planning_ms"] > 0 and times["execution_ms"] > 0 and times["outside_sql_ms"] >= 0
