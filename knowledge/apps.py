from django.apps import AppConfig
from django.db.models.signals import post_migrate


class KnowledgeConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "knowledge"

    def ready(self) -> None:
        # signals connects the receivers; tasks registers the tasks that knowledge.queue sends.
        from knowledge import monitoring, signals, tasks  # noqa: F401
        from knowledge.stores import apply_vector_column_storage

        monitoring.connect()
        post_migrate.connect(apply_vector_column_storage, sender=self)
