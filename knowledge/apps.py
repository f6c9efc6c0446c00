from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save


class KnowledgeConfig(AppConfig):
    default_auto_field = 'django.db.models.BigAutoField'
    name = 'knowledge'

    def ready(self):
        from knowledge.models import DictionaryTerm, Synonym

        # Synonyms and protected terms change answers without changing chunks: an edit (admin or
        # code) must not be hidden behind cached answers.
        for model in (Synonym, DictionaryTerm):
            for signal in (post_save, post_delete):
                uid = f"expire-answers-{model.__name__}-{id(signal)}"
                signal.connect(_expire_cached_answers, sender=model, dispatch_uid=uid)


def _expire_cached_answers(instance, **kwargs) -> None:
    from knowledge.services import expire_cached_answers

    expire_cached_answers(instance.tenant_id)
