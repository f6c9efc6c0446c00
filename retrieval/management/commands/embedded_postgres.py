from django.conf import settings
from django.core.management.base import BaseCommand

from retrieval_site.embedded import stop_embedded_postgres


class Command(BaseCommand):
    help = "Stop the embedded PostgreSQL server under var/ (it keeps running between commands)."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["stop"])

    def handle(self, *args, action: str, **options):
        from django.db import connections

        connections.close_all()
        stopped = stop_embedded_postgres(settings.EMBEDDED_PG_DIR)
        self.stdout.write("stopped embedded PostgreSQL" if stopped else "embedded PostgreSQL was not running")
