from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from core.embedded_postgres import stop_embedded_postgres
from core.redis import stop_embedded_redis


class Command(BaseCommand):
    help = "Stop the embedded PostgreSQL and Redis servers under var/ (they keep running between commands)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["stop"])

    def handle(self, *args: object, action: str, **options: object) -> None:
        from django.db import connections

        connections.close_all()
        for name, stopped in [
            ("Redis", stop_embedded_redis(settings.EMBEDDED_REDIS_DIR)),
            ("PostgreSQL", stop_embedded_postgres(settings.EMBEDDED_PG_DIR)),
        ]:
            self.stdout.write(f"stopped embedded {name}" if stopped else f"embedded {name} was not running")
