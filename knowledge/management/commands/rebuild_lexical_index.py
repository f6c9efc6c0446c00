import time

from django.core.management.base import BaseCommand, CommandError

from knowledge.selectors import active_knowledge_bases
from knowledge.services import rebuild_lexical_index


class Command(BaseCommand):
    help = "Rebuild the keyword (BM25) index of knowledge bases from the database (all KBs by default)."

    def add_arguments(self, parser):
        parser.add_argument("--kb", help="knowledge base name")
        parser.add_argument("--tenant", help="tenant name")

    def handle(self, *args, kb: str | None, tenant: str | None, **options):
        kbs = active_knowledge_bases(name=kb, tenant_name=tenant)
        if not kbs.exists():
            raise CommandError("no matching knowledge base")
        for knowledge_base in kbs:
            started = time.perf_counter()
            count = rebuild_lexical_index(knowledge_base.active_version)
            self.stdout.write(
                f"{knowledge_base}: {count} chunks indexed in {time.perf_counter() - started:.2f} s"
            )
