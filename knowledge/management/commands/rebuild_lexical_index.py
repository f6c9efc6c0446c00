from knowledge.lexical import rebuild_lexical_index
from knowledge.management.maintenance import ActiveVersionsCommand
from knowledge.models import KnowledgeBaseVersion


class Command(ActiveVersionsCommand):
    help = "Rebuild the keyword (BM25) index of knowledge bases from the database (all KBs by default)."

    def work(self, version: KnowledgeBaseVersion) -> str:
        return f"{rebuild_lexical_index(version)} chunks indexed"
