from typing import Any, cast

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import OperationalError, connection, transaction

from engines import chunk_partitions
from knowledge.models import Chunk
from tenants.models import Tenant

LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's lock_timeout


class Command(BaseCommand):
    help = (
        "Partition the chunk table by tenant (LIST on tenant_id), so a tenant's vector search walks only its "
        "partition's HNSW graphs. Without options: convert the table in place, its rows becoming the DEFAULT "
        "partition of small tenants (a short lock: catalog changes only), or list the partitions when it is "
        "partitioned already. --own gives a large tenant a partition of its own; --detach takes a tenant's own "
        "partition out of the table, to dump (a move) or drop, without rewriting the others."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--lock-timeout",
            type=float,
            default=chunk_partitions.LOCK_TIMEOUT_S,
            metavar="SECONDS",
            help="give up (nothing changed; run it again later) when a lock is not had within this time",
        )
        steps = parser.add_mutually_exclusive_group()
        steps.add_argument("--own", type=int, metavar="TENANT_ID", help="move this tenant into a partition of its own")
        steps.add_argument("--detach", type=int, metavar="TENANT_ID", help="detach this tenant's own partition")
        steps.add_argument(
            "--merge", action="store_true", help="the way back: every partition's rows in one plain table again"
        )

    def handle(
        self, *args: object, own: int | None, detach: int | None, merge: bool, lock_timeout: float, **options: object
    ) -> None:
        table = Chunk._meta.db_table
        try:
            if own is not None:
                if not Tenant.objects.filter(pk=own).exists():
                    raise CommandError(f"no tenant {own}")
                moved, seconds = chunk_partitions.own(table, own, lock_timeout)
                name = chunk_partitions.tenant_partition(table, own)
                self.stdout.write(f"tenant {own}: {moved} chunks moved to {name} in {seconds:.3f} s")
            elif detach is not None:
                name = chunk_partitions.detach(table, detach, lock_timeout)
                self.stdout.write(
                    f"tenant {detach}: its chunks are in table {name}, detached and no longer searched: "
                    f"pg_dump --table={name} to move them, DROP TABLE {name} to drop them"
                )
            elif merge:
                with transaction.atomic():
                    merged = chunk_partitions.merge(table, lock_timeout)
                    add_foreign_keys_to_chunks()
                self.stdout.write(f"{table} is one table again; it was locked for {merged.locked_s:.3f} s")
                if merged.graphs:
                    self.stdout.write("building its HNSW graphs again (searches scan exactly until they are built)")
                    chunk_partitions.build_graphs(merged.graphs)
                    self.stdout.write(f"built {', '.join(definition.split()[2] for definition in merged.graphs)}")
            elif not chunk_partitions.is_partitioned(table):
                locked = chunk_partitions.convert(table, lock_timeout)
                self.stdout.write(f"{table} is partitioned by tenant; it was locked for {locked:.3f} s")
            for partition in chunk_partitions.partitions(table):
                tenants = ", ".join(map(str, partition.tenant_ids)) or "DEFAULT"
                self.stdout.write(f"{partition.name}: tenants {tenants}, about {partition.rows} rows")
        except chunk_partitions.PartitionError as error:
            raise CommandError(str(error)) from error
        except OperationalError as error:
            if getattr(error.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                raise
            raise CommandError(
                f"a lock was not had within {lock_timeout:g} s (busy queries hold it): nothing changed, run it again"
            ) from error


def add_foreign_keys_to_chunks() -> None:
    """The keys to a chunk (graph mentions, passage relations) that a partitioned table cannot have,
    checked by the database again, under the names Django's migrations give them."""
    with connection.schema_editor() as editor:
        for relation in Chunk._meta.get_fields(include_hidden=True):  # the keys named "+" are hidden
            field = getattr(relation, "field", None)
            if field is not None and relation.auto_created and not relation.concrete and field.db_constraint:
                # the statement and name Django's own AddField gives a foreign key (PostgreSQL's editor)
                create = cast(Any, editor)._create_fk_sql(field.model, field, "_fk_%(to_table)s_%(to_column)s")
                editor.execute(create)
