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


@app.on_after_configure.connect  # type: ignore[untyped-decorator]  # Celery ships no type information
def start_embedded_broker(sender: object, **kwargs: object) -> None:
    """With no ``REDIS_URL`` the broker is the embedded Redis, which starts on first use: a worker, beat
    or a web process sending its first task may be that first use (the cache starts it otherwise)."""
    from core.redis import start_embedded_redis
    from retrieval_site.settings import env

    if not env.REDIS_URL and not env.CELERY_BROKER_URL:
        start_embedded_redis(env.EMBEDDED_REDIS_DIR)
