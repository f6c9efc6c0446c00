from django.apps import AppConfig


class GraphConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "graph"

    def ready(self) -> None:
        # signals connects the receivers; tasks registers the task that knowledge.queue sends by name;
        # ingestion (knowledge) gets its extraction from here, for knowledge imports nothing of the graph.
        from graph import extraction, signals, tasks  # noqa: F401
        from knowledge.graph_extraction import provide

        provide(extraction.KnowledgeBaseExtraction())
