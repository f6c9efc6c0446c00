from django.apps import AppConfig


class RetrievalConfig(AppConfig):
    default_auto_field = 'django.db.models.BigAutoField'
    name = 'retrieval'
