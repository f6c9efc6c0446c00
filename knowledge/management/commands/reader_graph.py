from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Count

from engines import principal_graphs
from knowledge.models import Chunk
from knowledge.stores import pgvector_index
from tenants.models import Tenant


class Command(BaseCommand):
    help = (
        "Give one principal of one tenant (a group whose readers search a large share of the tenant's chunks) "
        "an HNSW graph of its own, so their vector searches walk only the chunks they may read "
        "(engines.principal_graphs). Built online, one per embedding dimension of the tenant's chunks; PostgreSQL "
        "keeps it current. Without options: list the graphs."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", type=int, metavar="TENANT_ID")
        parser.add_argument(
            "--principal", metavar="PRINCIPAL", help="as documents' ACLs name it: group:<id>, user:<id>, *"
        )
        parser.add_argument("--drop", action="store_true", help="drop the principal's graphs instead")

    def handle(self, *args: object, tenant: int | None, principal: str | None, drop: bool, **options: Any) -> None:
        table = Chunk._meta.db_table
        if (tenant is None) != (principal is None):
            raise CommandError("--tenant and --principal go together")
        if tenant is not None and principal is not None:
            if not Tenant.objects.filter(pk=tenant).exists():
                raise CommandError(f"no tenant {tenant}")
            if drop:
                self._drop(table, tenant, principal)
            else:
                self._build(table, tenant, principal)
        for graph in principal_graphs.listed(table):
            state = "" if graph.valid else " (invalid: a build that failed; --drop removes it)"
            self.stdout.write(
                f"tenant {graph.tenant_id} {graph.principal} dimension {graph.dimension}: "
                f"about {graph.rows} rows, {graph.name}{state}"
            )

    def _build(self, table: str, tenant: int, principal: str) -> None:
        readable = (
            Chunk.objects.filter(tenant_id=tenant, acl__overlap=[principal])
            .values("embedding_dim")
            .annotate(rows=Count("id"))
            .order_by("embedding_dim")
        )
        if not readable:
            raise CommandError(f"no chunk of tenant {tenant} names {principal!r} in its ACL")
        index = pgvector_index()
        if index is None:
            raise CommandError(
                "VECTOR_BACKEND=milvus: Milvus walks the vectors, so a PostgreSQL graph would not be used"
            )
        for row in readable:
            dimension, rows = row["embedding_dim"], row["rows"]
            build = index.build_parameters(dimension, rows=rows)
            try:
                principal_graphs.create(table, tenant, principal, dimension, build)
            except ValueError as error:
                raise CommandError(str(error)) from error
            self.stdout.write(
                f"built the graph of {principal} in tenant {tenant}, dimension {dimension}: {rows} chunks"
            )

    def _drop(self, table: str, tenant: int, principal: str) -> None:
        dimensions = {graph.dimension for graph in principal_graphs.listed(table) if graph.tenant_id == tenant}
        dropped = [d for d in sorted(dimensions) if principal_graphs.drop(table, tenant, principal, d)]
        if not dropped:
            raise CommandError(f"tenant {tenant} has no graph of {principal!r}")
        self.stdout.write(f"dropped the graph of {principal} in tenant {tenant}, dimensions {dropped}")
