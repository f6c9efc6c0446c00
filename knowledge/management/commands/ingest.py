from pathlib import Path

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from engines.embedders import EmbeddingError
from knowledge.errors import InvalidChunking
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.ingestion.stored import queue_files
from knowledge.knowledge_bases import get_or_create_knowledge_base
from knowledge.models import PARENT_CHILD, PLAIN
from tenants.selectors import TenantNotFound, tenant_by_name


class Command(BaseCommand):
    help = "Ingest files and folders (recursively) into a knowledge base, skipping unchanged files."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", type=Path)
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--kb", required=True, help="knowledge base name; created when missing")
        parser.add_argument("--model", default=None, help="embedding model for a new knowledge base")
        parser.add_argument("--chunk-size", type=int, default=None, help="tokens per chunk for a new knowledge base")
        parser.add_argument("--chunk-overlap", type=int, default=None)
        parser.add_argument(
            "--chunking",
            choices=[PLAIN, PARENT_CHILD],
            default=None,
            help=f"for a new knowledge base: {PARENT_CHILD} searches small chunks and returns their parent passages",
        )
        parser.add_argument("--parent-chunk-size", type=int, default=None, help=f"{PARENT_CHILD}: tokens per parent")
        parser.add_argument(
            "--languages", default=None, help="languages the model covers, e.g. zh,en (default: known for the model)"
        )
        parser.add_argument("--no-progress", action="store_true")
        parser.add_argument(
            "--async",
            action="store_true",
            dest="run_async",
            help="queue the files for a Celery worker and print the task id instead of ingesting here",
        )

    def handle(
        self,
        *args: object,
        paths: list[Path],
        tenant: str,
        kb: str,
        languages: str | None,
        no_progress: bool,
        run_async: bool,
        **options: object,
    ) -> None:
        try:
            owner = tenant_by_name(tenant)
            files = discover_files(paths)
            knowledge_base, created = get_or_create_knowledge_base(
                tenant=owner,
                name=kb,
                embedding_model=options["model"],
                chunk_size=options["chunk_size"],
                chunk_overlap=options["chunk_overlap"],
                languages=[code.strip() for code in languages.split(",") if code.strip()] if languages else None,
                chunking=options["chunking"],
                parent_chunk_size=options["parent_chunk_size"],
            )
        except (TenantNotFound, FileNotFoundError, InvalidChunking, EmbeddingError) as exc:
            raise CommandError(str(exc)) from None
        if created:
            self.stdout.write(
                f"created knowledge base {kb} (id {knowledge_base.pk}, model {knowledge_base.embedding_model}, "
                f"{knowledge_base.chunk_size} tokens per chunk, {knowledge_base.chunking} chunking)"
            )
        if run_async:
            task = queue_files(knowledge_base, files)
            self.stdout.write(f"queued {len(files)} files; task {task.task_id}")
            return
        with tqdm(total=len(files), unit="doc", disable=no_progress, file=self.stderr) as bar:
            report = Ingester(knowledge_base, on_progress=bar.update, keep_originals=True).ingest(files)
        for source_uri, reason in report.failures:
            self.stderr.write(f"failed: {source_uri}: {reason}")
        if report.added or report.replaced:
            # the graph app's command (knowledge imports nothing of the graph): "<kb>: N communities in S s"
            call_command("graph_communities", kb=knowledge_base.name, tenant=owner.name, stdout=self.stdout)
        summary = report.as_dict()
        self.stdout.write(  # last, so a script can read it from the final line
            "documents: {added} added, {unchanged} unchanged, {replaced} replaced, {failed} failed; "
            "{chunks} chunks in {seconds} s".format(**summary)
        )
