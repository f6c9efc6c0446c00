from django.apps import AppConfig


class KnowledgeConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "knowledge"

    def ready(self):
        # signals connects the receivers; tasks registers the tasks that knowledge.queue sends.
        from knowledge import monitoring, signals, tasks  # noqa: F401

        monitoring.connect()
