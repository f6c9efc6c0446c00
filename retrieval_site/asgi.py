"""ASGI entry point, the one ``./run serve`` and docker-compose serve (gunicorn's asyncio worker,
``core.gunicorn_worker``): Django behind :class:`core.asgi.BoundedRequest`, which bounds request bodies
in time and size and reads chunked ones."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'retrieval_site.settings')

from core.asgi import BoundedRequest  # noqa: E402  (after the settings module is named)

application = BoundedRequest(get_asgi_application())
