from graph.build import rebuild_graph
from graph.community_build import rebuild_communities
from knowledge.management.maintenance import ActiveVersionsCommand
from knowledge.models import KnowledgeBaseVersion


class Command(ActiveVersionsCommand):
    help = (
        "Re-extract the entity graph of knowledge bases from the database with the current extractor (after "
        "an extractor change; all KBs by default), then recompute their communities."
    )

    def work(self, version: KnowledgeBaseVersion) -> str:
        chunks = rebuild_graph(version)
        return f"{chunks} chunks extracted, {rebuild_communities(version)} communities"
