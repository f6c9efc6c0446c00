"""``knowledge.stores``: the vector column's storage (``VECTOR_COLUMN_STORAGE``) on the real table,
read back from ``pg_attribute.attstorage``."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import override_settings

from knowledge.models import Chunk
from knowledge.stores import vector_index

pytestmark = pytest.mark.django_db


def attstorage() -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT attstorage FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'embedding'",
            [Chunk._meta.db_table],
        )
        return cursor.fetchone()[0]


def test_the_storage_setting_survives_a_migration_that_resets_the_column():
    assert attstorage() == "m"  # the setting's default: in the row
    with override_settings(VECTOR_COLUMN_STORAGE="plain"):
        call_command("migrate", verbosity=0)
        assert attstorage() == "p"
        # What a migration altering the column's type does: the type's default storage comes back.
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE knowledge_chunk ALTER COLUMN embedding TYPE vector USING embedding::vector")
        assert attstorage() == "e"
        call_command("migrate", verbosity=0)
        assert attstorage() == "p"
    call_command("migrate", verbosity=0)  # the default again
    assert attstorage() == "m"


def test_setting_the_storage_it_already_has_changes_nothing():
    index = vector_index()
    assert index.column_storage() == "main"
    assert index.set_column_storage("main") is False
    assert index.set_column_storage("external") is True and attstorage() == "e"
    with pytest.raises(ValueError, match="storage must be one of"):
        index.set_column_storage("compressed")
