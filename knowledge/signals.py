"""Model changes that cached answers must follow."""

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django_celery_beat.models import PeriodicTask

from knowledge.models import DictionaryTerm, KnowledgeSource, Synonym
from knowledge.revisions import expire_cached_answers


@receiver([post_save, post_delete], sender=Synonym)
@receiver([post_save, post_delete], sender=DictionaryTerm)
def expire_answers_on_expansion_change(instance: Synonym | DictionaryTerm, **kwargs: object) -> None:
    """Synonyms and protected terms change answers without changing chunks: an edit (admin or code)
    must not be hidden behind cached answers."""
    expire_cached_answers(instance.tenant_id)


@receiver(post_delete, sender=KnowledgeSource)
def delete_schedule_with_source(instance: KnowledgeSource, **kwargs: object) -> None:
    """A source's beat entry goes with it, however it is deleted (its KB or tenant deleted too)."""
    if instance.periodic_task_id is not None:
        PeriodicTask.objects.filter(pk=instance.periodic_task_id).delete()
