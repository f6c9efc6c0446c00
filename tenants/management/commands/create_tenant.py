from django.core.management.base import BaseCommand, CommandError

from tenants.errors import TenantExists
from tenants.models import Tenant
from tenants.services import create_tenant


class Command(BaseCommand):
    help = "Create a tenant."

    def add_arguments(self, parser):
        parser.add_argument("name")

    def handle(self, *args, name: str, **options):
        name = name.strip()
        if not 0 < len(name) <= (Tenant._meta.get_field("name").max_length or 0):
            raise CommandError("a tenant name must have 1 to 100 characters")
        try:
            tenant = create_tenant(name)
        except TenantExists as exists:
            raise CommandError(exists.message) from None
        self.stdout.write(f"created tenant {tenant.name} (id {tenant.pk})")
