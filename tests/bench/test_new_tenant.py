"""``bench/new_tenant.py``'s control: the chunk table indexed by the tenant alone meanwhile, and its
(tenant, id) index as ``knowledge 0025`` built it afterwards, also when the measurement fails."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from django.db import connection

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import new_tenant  # bench/ is not a package; its scripts import _common as a sibling


def tenant_indexes() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'knowledge_chunk' "
            "AND indexdef LIKE '%%(tenant_id%%'"
        )
        return {name: definition.split(" USING btree ")[1] for name, definition in cursor.fetchall()}


@pytest.mark.django_db
def test_the_control_indexes_the_tenant_alone_meanwhile_and_puts_the_index_back():
    seen = []

    def failing_measurement() -> None:
        with new_tenant.tenant_index_alone():
            seen.append(tenant_indexes())
            raise RuntimeError("a measurement that fails")

    assert tenant_indexes() == {"chunk_tenant_id": "(tenant_id, id)"}
    with pytest.raises(RuntimeError):
        failing_measurement()
    assert seen == [{"bench_chunk_tenant_only": "(tenant_id)"}]
    assert tenant_indexes() == {"chunk_tenant_id": "(tenant_id, id)"}
