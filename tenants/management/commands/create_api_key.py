from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from tenants.models import Scope
from tenants.selectors import TenantNotFound, tenant_by_name
from tenants.services import create_api_key, validate_scopes


class Command(BaseCommand):
    help = "Issue an API key for a tenant. The key is printed once, alone on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--name", default="")
        parser.add_argument("--expires-in-days", type=int, default=None)
        parser.add_argument(
            "--scopes",
            default=Scope.SEARCH.value,
            help=f"comma-separated, of {', '.join(Scope.values)} (default: search)",
        )
        parser.add_argument(
            "--kb",
            dest="kb_ids",
            type=int,
            action="append",
            default=[],
            metavar="ID",
            help="a knowledge base the key may reach (repeat for more); any other answers like a missing one. "
            "None given: all of the tenant's",
        )
        parser.add_argument(
            "--principal",
            dest="principals",
            action="append",
            default=[],
            metavar="PRINCIPAL",
            help="bind the key to a principal ('user:<id>' or 'group:<id>'; repeat for more): it searches as them",
        )

    def handle(
        self,
        *args: object,
        tenant: str,
        name: str,
        expires_in_days: int | None,
        scopes: str,
        kb_ids: list[int],
        principals: list[str],
        **options: object,
    ) -> None:
        if expires_in_days is not None and expires_in_days < 1:
            raise CommandError("--expires-in-days must be at least 1")
        try:
            scope_list = validate_scopes(scopes.split(","))
        except ValueError as exc:
            raise CommandError(f"--scopes: {exc}") from None
        try:
            owner = tenant_by_name(tenant)
        except TenantNotFound as exc:
            raise CommandError(str(exc)) from None
        expires_at = timezone.now() + timedelta(days=expires_in_days) if expires_in_days is not None else None
        try:
            issued = create_api_key(
                tenant=owner,
                name=name,
                expires_at=expires_at,
                scopes=scope_list,
                principals=principals,
                knowledge_base_ids=kb_ids,
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        limits = f"; knowledge bases: {', '.join(map(str, sorted(set(kb_ids))))}" if kb_ids else ""
        bound = f"; searches as: {', '.join(principals)}" if principals else ""
        self.stderr.write(
            f"API key {issued.api_key.prefix} for tenant {owner.name} (scopes: {', '.join(scope_list)}{limits}{bound}); "
            "store it now, it is not shown again:"
        )
        self.stdout.write(issued.raw_key)
