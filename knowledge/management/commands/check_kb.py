from django.core.management.base import BaseCommand, CommandError, CommandParser

from knowledge.lexical import VersionCheck, check_version
from knowledge.models import KnowledgeBaseVersion
from knowledge.stores import vector_rebuild_advice


class Command(BaseCommand):
    help = (
        "Compare each knowledge base version's chunk rows with its keyword (BM25) index and report drift: "
        "chunks missing from the index, entries for chunks that do not exist, duplicates, committed changes "
        "not yet indexed, ready documents without chunks, chunks outside their document's knowledge base. "
        "Exits 1 while drift remains; --repair fixes the index (applies pending changes, rebuilds from the rows "
        "if it still differs). Row drift needs a re-ingestion and is only reported. An HNSW index built for fewer "
        "rows than it holds gets a rebuild hint (manage.py rebuild_vector_index)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--kb", help="knowledge base name")
        parser.add_argument("--tenant", help="tenant name")
        parser.add_argument("--repair", action="store_true", help="fix the keyword index from the rows")

    def handle(self, *args: object, kb: str | None, tenant: str | None, repair: bool, **options: object) -> None:
        versions = KnowledgeBaseVersion.objects.select_related("knowledge_base__tenant").order_by(
            "knowledge_base_id", "number"
        )
        if kb:
            versions = versions.filter(knowledge_base__name=kb)
        if tenant:
            versions = versions.filter(knowledge_base__tenant__name=tenant)
        if (kb or tenant) and not versions.exists():
            raise CommandError("no matching knowledge base")
        unresolved = 0
        for version in versions:
            check = check_version(version, repair=repair)
            self.stdout.write(_describe(check))
            unresolved += (check.index_drift and not check.repaired) or check.row_drift
        # Advice, not drift: the index answers, with less recall than a rebuild would give.
        for hint in vector_rebuild_advice(sorted({version.embedding_dim for version in versions})):
            self.stdout.write(f"REBUILD HINT {hint}")
        if unresolved:
            advice = "re-ingest the documents named above" if repair else "run with --repair"
            raise CommandError(f"{unresolved} knowledge base version(s) drift: {advice}")


def _describe(check: VersionCheck) -> str:
    if check.repaired:
        outcome = "REPAIRED"
    elif check.index_drift or check.row_drift:
        outcome = "DRIFT"
    else:
        outcome = "ok"
    line = (
        f"{outcome} {check.version.knowledge_base} v{check.version.number}: {check.chunks} chunks, "
        f"{check.entries} index entries, {check.pending_changes} pending changes; {len(check.missing)} missing, "
        f"{len(check.orphans)} orphans, {check.duplicates} duplicates; "
        f"{len(check.documents_without_chunks)} ready documents without chunks, "
        f"{check.misplaced_chunks} chunks outside their document's knowledge base"
    )
    if check.documents_without_chunks:
        line += f" (document ids {check.documents_without_chunks[:20]})"
    return line
