"""Every environment variable the service reads: the sections, read together once.

Importing this starts no server. With no ``DATABASE_URL`` the database backend
``core.embedded_postgres`` starts (or attaches to) an embedded PostgreSQL 18 + pgvector under
``var/`` on its first connection; with one it uses that server. Same migrations, same code.
Likewise ``REDIS_URL``: unset, the cache starts an embedded Redis on a unix socket under ``var/``
when it first connects.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from pydantic import ValidationError

from retrieval_site.settings.base import Section
from retrieval_site.settings.cache import Cache
from retrieval_site.settings.cost import Cost
from retrieval_site.settings.database import Database
from retrieval_site.settings.embeddings import Embeddings
from retrieval_site.settings.graph import Graph
from retrieval_site.settings.http import HttpFront
from retrieval_site.settings.ingestion import Ingestion
from retrieval_site.settings.observability import Observability
from retrieval_site.settings.remote import RemoteServices
from retrieval_site.settings.search import Search
from retrieval_site.settings.tasks import Tasks


# The sections in reverse reading order: pydantic orders the fields of the last base first. Named here (not
# unpacked from SECTIONS) so that mypy knows every field's type.
class Environment(Cost, Tasks, Ingestion, RemoteServices, Graph, Search, Embeddings, Cache, Database, Observability, HttpFront):  # fmt: skip
    """All sections as one object: every variable parsed once, each field a Django setting of its name."""


# In the order they are read: a default may be made from a variable of a section before it (Search's
# LEXICAL_INDEX_DIR from Database's DATABASE_URL). docs/configuration.md has one table per section.
SECTIONS: tuple[type[Section], ...] = (
    Section,
    *(base for base in reversed(Environment.__bases__) if issubclass(base, Section)),
)


def read_environment() -> Environment:
    """The environment, parsed; a bad value stops startup naming every variable at fault.

    Values are left out of the message: a URL or key may carry a secret.
    """
    try:
        return Environment()
    except ValidationError as exc:
        problems = [
            f"{error['loc'][0]}: {error['msg']}"
            for error in exc.errors()
            if error["type"] != "default_factory_not_called"  # a default made from a bad variable
        ]
        raise ImproperlyConfigured("invalid environment variables:\n  " + "\n  ".join(problems)) from None
