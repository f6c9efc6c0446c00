from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.names import InvalidName
from tenants.errors import TenantExists
from tenants.services import create_tenant


class Command(BaseCommand):
    help = "Create a tenant."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")

    def handle(self, *args: object, name: str, **options: object) -> None:
        try:
            tenant = create_tenant(name)
        except (TenantExists, InvalidName) as refused:
            raise CommandError(refused.message) from None
        self.stdout.write(f"created tenant {tenant.name} (id {tenant.pk})")
