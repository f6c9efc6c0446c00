"""What the maintenance commands share: the knowledge bases they work on and one line per KB."""

import time

from django.core.management.base import BaseCommand, CommandError, CommandParser

from knowledge.models import KnowledgeBaseVersion
from knowledge.selectors.api import active_knowledge_bases


class ActiveVersionsCommand(BaseCommand):
    """Runs ``work`` on the active version of every KB (or of ``--kb`` / ``--tenant``), printing
    ``<kb>: <what it did> in <seconds> s`` for each."""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--kb", help="knowledge base name")
        parser.add_argument("--tenant", help="tenant name")

    def handle(self, *args: object, kb: str | None, tenant: str | None, **options: object) -> None:
        kbs = active_knowledge_bases(name=kb, tenant_name=tenant)
        if not kbs.exists():
            raise CommandError("no matching knowledge base")
        for knowledge_base in kbs:
            started = time.perf_counter()
            done = self.work(knowledge_base.require_active_version())
            self.stdout.write(f"{knowledge_base}: {done} in {time.perf_counter() - started:.2f} s")

    def work(self, version: KnowledgeBaseVersion) -> str:
        """Do the command's work on one version; say what was done (e.g. "12 chunks indexed")."""
        raise NotImplementedError
