"""Graph changes that cached answers must follow."""

from typing import Any

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from knowledge.models import GraphEntityRule, KnowledgeBaseVersion
from knowledge.revisions import bump_revisions


@receiver([post_save, post_delete], sender=GraphEntityRule)
def expire_answers_on_graph_curation(instance: GraphEntityRule, **kwargs: Any) -> None:
    """A curator's edit changes which entity a query's name finds and every path through it, in each
    version of its KB: their cached answers and cached curation (``graph.query_setup``) expire."""
    bump_revisions(
        KnowledgeBaseVersion.objects.filter(knowledge_base_id=instance.knowledge_base_id).values_list("pk", flat=True)
    )
