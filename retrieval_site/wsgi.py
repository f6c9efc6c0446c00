"""WSGI entry point for ``manage.py runserver`` (development) and WSGI servers. ``./run serve`` serves
``retrieval_site.asgi``, the same Django handler behind an event loop that reads requests first."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "retrieval_site.settings")

application = get_wsgi_application()
