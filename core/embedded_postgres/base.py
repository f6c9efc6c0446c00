"""Django's PostgreSQL backend on the embedded server, which it starts (or attaches to) when it connects.

Settings select it (``ENGINE "core.embedded_postgres"``) when ``DATABASE_URL`` is unset, so importing
settings starts nothing and every entry point (``manage.py``, gunicorn workers, pytest) gets the
server on its first query. The socket folder is only known once the server runs, so it is filled in
here rather than in settings.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.backends.postgresql import base

from core.embedded_postgres import start_embedded_postgres


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self) -> dict[str, Any]:
        params = super().get_connection_params()
        server_settings = {
            "shared_buffers": f"{settings.EMBEDDED_PG_SHARED_BUFFERS_MB}MB",
            "effective_cache_size": f"{settings.EMBEDDED_PG_EFFECTIVE_CACHE_SIZE_MB}MB",
        }
        params["host"] = str(start_embedded_postgres(settings.EMBEDDED_PG_DIR, server_settings))
        return params
