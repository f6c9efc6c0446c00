"""WSGI entry point for ``manage.py runserver`` (development). The served entry point is
``retrieval_site.asgi`` under gunicorn's asyncio worker (``retrieval_site/gunicorn.conf.py``)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'retrieval_site.settings')

application = get_wsgi_application()
