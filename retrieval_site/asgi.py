"""The entry point ``./run serve`` and docker-compose serve (``retrieval_site/gunicorn.conf.py``: gunicorn's
asyncio worker, ``core.gunicorn_worker``): Django's WSGI handler on ``WEB_THREADS`` threads, each request
handed over once it has arrived whole, with bodies bounded in time and size and chunked ones read
(:mod:`core.asgi`); and the MCP server's streamable HTTP at ``/mcp`` (:mod:`retrieval.mcp_server`)."""

import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "retrieval_site.settings")

from core.asgi import BoundedRequest, PathMount, WSGIOnThreads  # after the settings module is named

django_application = WSGIOnThreads(get_wsgi_application(), settings.WEB_THREADS)  # calls django.setup()

from retrieval.mcp_server import MCP_PATH, mcp_asgi_app  # noqa: E402  # once the apps are loaded

application = BoundedRequest(PathMount(django_application, MCP_PATH, mcp_asgi_app()))
