"""WSGI entry point (gunicorn ``retrieval_site.wsgi``): Django, reading chunked request bodies too."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'retrieval_site.settings')

from core.chunked import ChunkedBodyMiddleware  # noqa: E402  (after the settings module is named)

application = ChunkedBodyMiddleware(get_wsgi_application())
