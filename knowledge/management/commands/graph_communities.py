import time

from django.core.management.base import BaseCommand, CommandError

from knowledge.communities import rebuild_communities
from knowledge.selectors import active_knowledge_bases


class Command(BaseCommand):
    help = (
        "Recompute the graph communities and their summaries of knowledge bases' active versions now (the "
        "task does it after each ingestion and build); all KBs by default."
    )

    def add_arguments(self, parser):
        parser.add_argument("--kb", help="knowledge base name")
        parser.add_argument("--tenant", help="tenant name")

    def handle(self, *args, kb: str | None, tenant: str | None, **options):
        kbs = active_knowledge_bases(name=kb, tenant_name=tenant)
        if not kbs.exists():
            raise CommandError("no matching knowledge base")
        for knowledge_base in kbs:
            started = time.perf_counter()
            count = rebuild_communities(knowledge_base.active_version)
            self.stdout.write(f"{knowledge_base}: {count} communities in {time.perf_counter() - started:.2f} s")
