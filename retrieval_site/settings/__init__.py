"""The Django settings module: the environment's sections (``retrieval_site/settings/*.py``, one concern
each, read once by ``read_environment``) and the Django, DRF, Celery and logging settings made from them.

Every environment variable is also a Django setting of its field's name and type (``variables``, generated from
the sections), so code reads ``settings.X`` only.
Fields marked ``Ranks`` change rankings: the search cache key includes them (``RANKING_SETTINGS``).
Importing this module starts no server (see ``environment``).
"""

from __future__ import annotations

from typing import Any

import dj_database_url
import django_stubs_ext

from core.embedded_postgres import EMBEDDED_DATABASE, EMBEDDED_USER
from core.faults import refuse_in_production
from core.redis import celery_redis_url, embedded_redis_location
from retrieval_site.settings.base import BASE_DIR
from retrieval_site.settings.database import pooled_database
from retrieval_site.settings.environment import Environment

# Every field is a Django setting of the same name and type: variables.py is generated from Environment.
from retrieval_site.settings.variables import *  # noqa: F403
from retrieval_site.settings.variables import env

django_stubs_ext.monkeypatch()  # ModelForm[M], ModelAdmin[M] and the like: subscriptable at run time
refuse_in_production(env.CRASH_TEST_PAUSE_AT, debug=env.DEBUG, fault_injection=env.FAULT_INJECTION)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "corsheaders",
    "django_prometheus",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "core",
    "tenants",
    "knowledge",
    "graph",
    "retrieval",
]

MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "core.request_id.RequestIdMiddleware",
    "core.logging.AccessLogMiddleware",
    "core.metrics.MetricsMiddleware",
    "core.cost.CostMiddleware",
    "core.query_string.QueryStringMiddleware",  # an undecodable query string: 400 on the API
    "corsheaders.middleware.CorsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

ROOT_URLCONF = "retrieval_site.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "retrieval_site.wsgi.application"

# --- Database -------------------------------------------------------------------------------
if env.DATABASE_URL:
    DATABASES: dict[str, Any] = {"default": dj_database_url.parse(env.DATABASE_URL, conn_max_age=env.DB_CONN_MAX_AGE)}
else:  # the backend starts (or attaches to) the server under EMBEDDED_PG_DIR and finds its socket
    DATABASES = {
        "default": {
            "ENGINE": "core.embedded_postgres",
            "NAME": EMBEDDED_DATABASE,
            "USER": EMBEDDED_USER,
            "CONN_MAX_AGE": env.DB_CONN_MAX_AGE,
        }
    }
DATABASES["default"].setdefault("OPTIONS", {})
# pgvector 0.8: keep scanning the HNSW graph until enough rows pass the SQL filters (the vector engine also
# sets it on each of its queries, where a pooler drops startup options).
DATABASES["default"]["OPTIONS"]["options"] = f"-c hnsw.iterative_scan={env.HNSW_ITERATIVE_SCAN}"
DATABASES["default"]["TEST"] = {"NAME": env.TEST_DATABASE_NAME}
if env.DATABASE_POOLED:
    DATABASES["default"] = pooled_database(DATABASES["default"])
# Read replicas: searches' reads (core.replicas chooses, the router sends the ORM's there), never a write.
for number, url in enumerate(env.DATABASE_REPLICA_URLS):
    replica = dj_database_url.parse(url, conn_max_age=env.DB_CONN_MAX_AGE)
    replica.setdefault("OPTIONS", {}).update(
        connect_timeout=env.REPLICA_CONNECT_TIMEOUT_S, options=DATABASES["default"]["OPTIONS"]["options"]
    )
    replica["TEST"] = {"MIRROR": "default"}  # a test run has no test database on the replicas: use the primary's
    DATABASES[f"replica_{number}"] = pooled_database(replica) if env.DATABASE_POOLED else replica
DATABASE_ROUTERS = ["retrieval_site.db_router.ReplicaRouter"]

# --- Redis: result cache, rate-limit counters, idempotency records ----------------------------
REDIS_URL = env.REDIS_URL or embedded_redis_location(env.EMBEDDED_REDIS_DIR)
CACHES: dict[str, Any] = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "retrieval",
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": env.REDIS_TIMEOUT_S, "SOCKET_TIMEOUT": env.REDIS_TIMEOUT_S},
    }
}
if not env.REDIS_URL:  # the embedded server starts on the cache's first connection
    CACHES["default"]["OPTIONS"]["CONNECTION_FACTORY"] = "core.redis.EmbeddedRedisConnectionFactory"
RATELIMIT_USE_CACHE = "default"  # django-ratelimit's own settings: where its counters live,
RATELIMIT_FAIL_OPEN = env.RATE_LIMIT_FAIL_OPEN  # and the same fail-open choice

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = env.VAR_DIR / "static"
STORAGES: dict[str, Any] = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

REST_FRAMEWORK: dict[str, Any] = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["tenants.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["tenants.authentication.HasTenant"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "EXCEPTION_HANDLER": "core.errors.api_exception_handler",
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_METADATA_CLASS": "core.metadata.SchemaPointerMetadata",  # OPTIONS: allowed methods + schema link
}

# --- OpenAPI (/api/schema/, Swagger UI at /api/docs/ with assets served locally) -------------
SPECTACULAR_SETTINGS: dict[str, Any] = {
    "TITLE": "Retrieval service API",
    "DESCRIPTION": (
        "Ranked passages from a tenant's knowledge bases for RAG engines and agents. Every response carries "
        '`X-Request-ID`; every error is `{"error": {"code", "message", "request_id"}}`.'
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_AUTHENTICATION": [],  # the schema and docs are public; the key is entered in Swagger UI
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # /mcp is served by the ASGI app, not a view: documented by a hook (retrieval.mcp_schema)
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "retrieval.mcp_schema.add_mcp_path",
        "retrieval.schema.dify_body_is_optional",  # Dify's older registration probe sends no body
    ],
}

# --- CORS (browsers calling the API from other origins) ---------------------------------------
CORS_URLS_REGEX = r"^/api/.*$"
CORS_ALLOW_HEADERS = ["accept", "authorization", "content-type", "x-api-key", "idempotency-key", "x-request-id"]
CORS_EXPOSE_HEADERS = [
    "X-Request-ID",
    "X-RateLimit-Limit",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
    "Retry-After",
    "Idempotent-Replayed",
]

# --- Search ---------------------------------------------------------------------------------
SEARCH_WEIGHTS = {  # default retriever weights
    "vector": env.SEARCH_WEIGHT_VECTOR,
    "bm25": env.SEARCH_WEIGHT_BM25,
    "graph": env.SEARCH_WEIGHT_GRAPH,
}
# What the search cache key includes: every field marked Ranks and the settings made from them.
RANKING_SETTINGS = (*Environment.ranking(), "SEARCH_WEIGHTS")

# Every log line carries the request id; retrieval.access logs one line per request.
LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "core.logging.RequestIdFilter"}},
    "formatters": {
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(levelname)s %(name)s %(message)s %(request_id)s",
            "rename_fields": {"levelname": "level", "name": "logger"},
            "timestamp": True,
        },
        "text": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "filters": ["request_id"], "formatter": env.LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": env.LOG_LEVEL},
    "loggers": {"embedded_postgres": {"level": "WARNING"}},
}

# --- Traces: log lines carry trace_id and span_id beside request_id while tracing is on -------
MIDDLEWARE.insert(MIDDLEWARE.index("core.request_id.RequestIdMiddleware") + 1, "core.tracing.TracingMiddleware")
if env.tracing:
    LOGGING["filters"]["trace_context"] = {"()": "core.tracing.TraceContextFilter"}
    LOGGING["handlers"]["console"]["filters"].append("trace_context")
    LOGGING["formatters"]["text"]["format"] = (
        "%(asctime)s %(levelname)s %(name)s [%(request_id)s %(trace_id)s] %(message)s"
    )

# --- Hardening ---------------------------------------------------------------------------------
# One JSON parser that answers any body with data or a 400 (deep nesting, lone surrogates, 1e999).
REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"] = ["core.parsers.StrictJSONParser"]
# Every Redis command goes through the circuit breaker (core.redis).
CACHES["default"]["OPTIONS"]["REDIS_CLIENT_CLASS"] = "core.redis.GuardedRedis"

# --- Celery -------------------------------------------------------------------------------------
CELERY_BROKER_URL = env.CELERY_BROKER_URL or celery_redis_url(REDIS_URL, env.CELERY_BROKER_DB)
CELERY_RESULT_BACKEND = env.CELERY_RESULT_BACKEND or celery_redis_url(REDIS_URL, env.CELERY_RESULT_DB)
CELERY_TASK_SERIALIZER = CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True  # a task is acknowledged when it ends: a killed worker's task runs again
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1  # long tasks: a worker reserves one at a time
CELERY_TASK_TRACK_STARTED = True  # STARTED between PENDING and PROGRESS
CELERY_RESULT_EXPIRES = env.TASK_RESULT_TTL_S
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_CONCURRENCY = env.CELERY_CONCURRENCY
CELERY_WORKER_HIJACK_ROOT_LOGGER = False  # keep the JSON log lines of LOGGING
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env.CELERY_VISIBILITY_TIMEOUT_S,
    "unacked_restore_throttle": 1,  # look for such tasks every 10 s (and when a worker starts)
}
# Beat reads its schedule from the database (django-celery-beat): the entries below are written there
# when beat starts; each knowledge source adds its own (an interval or a crontab, editable in the admin).
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_BEAT_SCHEDULE = {
    "purge-old-versions": {"task": "knowledge.tasks.purge_versions", "schedule": 3600.0},
    "purge-removed-documents": {"task": "knowledge.tasks.purge_removed_documents", "schedule": 3600.0},
    "purge-search-logs": {"task": "retrieval.tasks.purge_search_logs", "schedule": 3600.0},
    "purge-semantic-cache": {"task": "retrieval.tasks.purge_semantic_cache", "schedule": 3600.0},
}
DJANGO_CELERY_BEAT_TZ_AWARE = True
STORAGES["originals"] = {
    "BACKEND": env.ORIGINALS_STORAGE_BACKEND or "django.core.files.storage.FileSystemStorage",
    "OPTIONS": {} if env.ORIGINALS_STORAGE_BACKEND else {"location": str(env.ORIGINALS_DIR)},
}
# Documents and versions both have a "status": their enums get names of their own in the OpenAPI schema.
SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"] = {
    "DocumentStatusEnum": "knowledge.models.Document.Status",
    "VersionStatusEnum": "knowledge.models.KnowledgeBaseVersion.Status",
    "CacheKindEnum": ["semantic"],  # a semantic hit's cache.kind
    "KindEnum": "knowledge.models.KnowledgeSource.Kind",  # its name before CacheKindEnum joined it
}
