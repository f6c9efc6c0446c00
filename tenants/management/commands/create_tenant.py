from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError

from tenants.services import create_tenant


class Command(BaseCommand):
    help = "Create a tenant."

    def add_arguments(self, parser):
        parser.add_argument("name")

    def handle(self, *args, name: str, **options):
        try:
            tenant = create_tenant(name)
        except IntegrityError:
            raise CommandError(f"a tenant named {name!r} already exists") from None
        self.stdout.write(f"created tenant {tenant.name} (id {tenant.pk})")
