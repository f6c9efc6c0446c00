"""A part of the search suite on the chunk table partitioned by tenant (``manage.py partition_chunks``,
a tenant of the rows given a partition of its own): every filter case of test_filters.py selects
through the pgvector search exactly the rows it selects in SQL, and the permissions leak matrix of
test_permissions.py holds in every mode. The conversion is transactional DDL, made in each test's
transaction and rolled back with it."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from engines import chunk_partitions
from engines.base import SearchScope
from engines.pgvector_index import PgVectorIndex
from knowledge.models import Chunk
from retrieval.filters import compile_filters
from tests.factories import DIMENSION, unit_vector
from tests.retrieval.filter_rows import Dataset
from tests.retrieval.test_filters import (  # noqa: F401 (rerun here, on the partitioned table)
    test_business_field_operators,
    test_created_at_operators,
    test_doc_id_operators,
    test_logical_combinations,
    test_metadata_operators,
    test_not_is_the_complement_of_its_filter,
)
from tests.retrieval.test_permissions import (
    corpus,  # noqa: F401 (the leak matrix's corpus)
    leak_matrix,
)

pytestmark = pytest.mark.django_db

CHUNKS = Chunk._meta.db_table


@pytest.fixture(autouse=True)
def partitioned(db) -> None:
    """Before the test's rows: the table partitioned, its rows then written through the parent."""
    call_command("partition_chunks", stdout=io.StringIO())
    assert chunk_partitions.is_partitioned(CHUNKS)


class PartitionedDataset(Dataset):
    """filter_rows' rows, selected by the pgvector search of the whole scope instead of by the ORM."""

    def select(self, filters) -> set[int]:
        compiled = compile_filters(filters)
        kb = next(iter(self.docs.values())).knowledge_base
        scope = SearchScope(kb.tenant_id, (kb.active_version_id,), DIMENSION)
        return {hit.chunk_id for hit in PgVectorIndex(CHUNKS).search(scope, unit_vector(1), 100, compiled.sql)}


@pytest.fixture
def filter_rows(filter_rows):  # the rows' tenant in a partition of its own, the noise row's in DEFAULT
    kb = next(iter(filter_rows.docs.values())).knowledge_base
    call_command("partition_chunks", "--own", str(kb.tenant_id), stdout=io.StringIO())
    return PartitionedDataset(filter_rows.ids, filter_rows.docs, filter_rows.base)


def test_the_leak_matrix_holds_on_the_partitioned_table(corpus):  # noqa: F811
    tenant, _ = corpus
    call_command("partition_chunks", "--own", str(tenant.pk), stdout=io.StringIO())
    assert leak_matrix(corpus) == 6 * 2 * 5 * 3 * 2
