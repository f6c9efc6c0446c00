from django.apps import AppConfig


class KnowledgeConfig(AppConfig):
    default_auto_field = 'django.db.models.BigAutoField'
    name = 'knowledge'

    def ready(self):
        from knowledge import monitoring, signals  # noqa: F401 - signals connects the receivers
        from knowledge import tasks  # noqa: F401 - registers the tasks that knowledge.queue sends

        monitoring.connect()
