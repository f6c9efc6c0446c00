from graph.community_build import rebuild_communities
from knowledge.management.maintenance import ActiveVersionsCommand
from knowledge.models import KnowledgeBaseVersion


class Command(ActiveVersionsCommand):
    help = (
        "Recompute the graph communities and their summaries of knowledge bases' active versions now (the "
        "task does it after each ingestion and build); all KBs by default."
    )

    def work(self, version: KnowledgeBaseVersion) -> str:
        return f"{rebuild_communities(version)} communities"
