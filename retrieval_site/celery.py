"""The Celery app (wiring layer): configured from Django settings (``CELERY_*``), tasks found in each
app's ``tasks`` module, where they are declared with ``@shared_task`` so no domain app imports this.

Run a worker with ``celery -A retrieval_site worker``; ``./run serve`` starts one beside gunicorn.
"""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "retrieval_site.settings")

app = Celery("retrieval_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
