"""Settings, all read from the environment here and nowhere else.

With no ``DATABASE_URL`` the service starts (or attaches to) an embedded PostgreSQL 18 + pgvector
under ``var/``; with one it uses that server. Same migrations, same code. Likewise ``REDIS_URL``:
unset, an embedded Redis on a unix socket under ``var/``.
"""
from __future__ import annotations

import ipaddress
import os
import secrets
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("VAR_DIR", BASE_DIR / "var"))


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else default


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def _local_secret_key() -> str:
    """A per-checkout random key for local runs; production sets DJANGO_SECRET_KEY."""
    path = VAR_DIR / "secret_key"
    if not path.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = env_str("DJANGO_SECRET_KEY") or _local_secret_key()
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS")

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
    "core",
    "tenants",
    "knowledge",
    "retrieval",
]

MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "core.request_id.RequestIdMiddleware",
    "core.logging.AccessLogMiddleware",
    "core.metrics.MetricsMiddleware",
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
EMBEDDED_PG_DIR = Path(env_str("EMBEDDED_PG_DIR") or VAR_DIR / "pgdata")
DATABASE_URL = env_str("DATABASE_URL")
if not DATABASE_URL:
    from core.embedded_postgres import embedded_postgres_uri

    DATABASE_URL = embedded_postgres_uri(EMBEDDED_PG_DIR)

DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=env_int("DB_CONN_MAX_AGE", 60))}
DATABASES["default"].setdefault("OPTIONS", {})
# pgvector 0.8: keep scanning the HNSW graph until enough rows pass the SQL filters.
DATABASES["default"]["OPTIONS"]["options"] = "-c hnsw.iterative_scan=relaxed_order"
DATABASES["default"]["TEST"] = {"NAME": env_str("TEST_DATABASE_NAME", "test_retrieval")}

# --- Redis: result cache, rate-limit counters, idempotency records ----------------------------
# With no REDIS_URL the service starts (or attaches to) an embedded Redis on a unix socket under var/.
EMBEDDED_REDIS_DIR = Path(env_str("EMBEDDED_REDIS_DIR") or VAR_DIR / "redis")
REDIS_URL = env_str("REDIS_URL")
if not REDIS_URL:
    from core.redis import embedded_redis_url

    REDIS_URL = embedded_redis_url(EMBEDDED_REDIS_DIR)
REDIS_TIMEOUT_S = float(env_str("REDIS_TIMEOUT_S", "0.5"))  # short: a Redis outage degrades, never stalls
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "retrieval",
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": REDIS_TIMEOUT_S, "SOCKET_TIMEOUT": REDIS_TIMEOUT_S},
    }
}
SEARCH_CACHE_TTL_S = env_int("SEARCH_CACHE_TTL_S", 3600)  # 0 disables the result cache
# Each process remembers usable API keys this long: a revocation elsewhere takes up to this to apply.
API_KEY_CACHE_TTL_S = env_int("API_KEY_CACHE_TTL_S", 5)
SEARCH_CACHE_WAIT_S = float(env_str("SEARCH_CACHE_WAIT_S", "2.0"))  # identical misses wait for the first
# Tiers live in the database (admin: Rate tiers); counters are fixed windows of this length.
RATE_LIMIT_WINDOW_S = env_int("RATE_LIMIT_WINDOW_S", 60)
RATE_LIMIT_FAIL_OPEN = env_bool("RATE_LIMIT_FAIL_OPEN", True)  # Redis down: serve (true) or 503 (false)
RATE_LIMIT_ANONYMOUS = env_int("RATE_LIMIT_ANONYMOUS", 100)  # per client IP and window, no key or a bad one
RATELIMIT_USE_CACHE = "default"  # django-ratelimit's own settings: where its counters live,
RATELIMIT_FAIL_OPEN = RATE_LIMIT_FAIL_OPEN  # and the same fail-open choice
IDEMPOTENCY_TTL_S = env_int("IDEMPOTENCY_TTL_S", 24 * 3600)  # how long a stored response is replayed
IDEMPOTENCY_LOCK_TTL_S = env_int("IDEMPOTENCY_LOCK_TTL_S", 120)  # in-flight marker; outlives any request

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
STATIC_ROOT = VAR_DIR / "static"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# Search requests are small; anything larger is refused with 413 before it is parsed.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("MAX_REQUEST_BYTES", 256 * 1024)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["tenants.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["tenants.authentication.HasTenant"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "EXCEPTION_HANDLER": "core.errors.api_exception_handler",
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

# --- OpenAPI (/api/schema/, Swagger UI at /api/docs/ with assets served locally) -------------
SPECTACULAR_SETTINGS = {
    "TITLE": "Retrieval service API",
    "DESCRIPTION": (
        "Ranked passages from a tenant's knowledge bases for RAG engines and agents. Every response carries "
        "`X-Request-ID`; every error is `{\"error\": {\"code\", \"message\", \"request_id\"}}`."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_AUTHENTICATION": [],  # the schema and docs are public; the key is entered in Swagger UI
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- CORS (browsers calling the API from other origins) ---------------------------------------
CORS_ALLOWED_ORIGINS = env_list("CORS_ALLOWED_ORIGINS")  # e.g. https://app.example.com; empty: no cross-origin
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

# --- Metrics and health ---------------------------------------------------------------------
# /metrics answers these addresses or networks (the TCP peer, not X-Forwarded-For), or any
# client sending "Authorization: Bearer <METRICS_TOKEN>" when a token is set.
METRICS_ALLOWED_IPS = env_list("METRICS_ALLOWED_IPS", "127.0.0.1,::1")
for _network in METRICS_ALLOWED_IPS:
    ipaddress.ip_network(_network, strict=False)  # a typo fails at startup, not at the first scrape
METRICS_TOKEN = env_str("METRICS_TOKEN")

# --- Embeddings and search ------------------------------------------------------------------
# A name from the bundled aliases (all-MiniLM-L6-v2), a sentence-transformers model folder, or,
# with EMBEDDING_URL set, the model name sent to that OpenAI-compatible /v1/embeddings endpoint.
EMBEDDING_MODEL = env_str("EMBEDDING_MODEL", "all-MiniLM-L6-v2")
EMBEDDING_URL = env_str("EMBEDDING_URL")
EMBEDDING_API_KEY = env_str("EMBEDDING_API_KEY")
EMBEDDING_TIMEOUT_S = float(env_str("EMBEDDING_TIMEOUT_S", "30"))
EMBEDDING_BATCH_SIZE = env_int("EMBEDDING_BATCH_SIZE", 32)
EMBEDDING_LANGUAGES = env_list("EMBEDDING_LANGUAGES")  # for models the service does not know, e.g. "zh,en"
TORCH_THREADS = env_int("TORCH_THREADS", os.cpu_count() or 1)

CHUNK_SIZE_TOKENS = env_int("CHUNK_SIZE_TOKENS", 200)
CHUNK_OVERLAP_TOKENS = env_int("CHUNK_OVERLAP_TOKENS", 32)

# Below this many matching rows a filtered search scans them exactly instead of walking HNSW.
VECTOR_EXACT_SCAN_THRESHOLD = env_int("VECTOR_EXACT_SCAN_THRESHOLD", 4000)
HNSW_EF_SEARCH = env_int("HNSW_EF_SEARCH", 100)

# --- Lexical search -----------------------------------------------------------------------
ELASTICSEARCH_URL = env_str("ELASTICSEARCH_URL")  # set: Elasticsearch; unset: embedded tantivy
ELASTICSEARCH_INDEX_PREFIX = env_str("ELASTICSEARCH_INDEX_PREFIX", "retrieval")
# tantivy indexes live per database, so test databases never read the service's indexes.
LEXICAL_INDEX_DIR = Path(env_str("LEXICAL_INDEX_DIR") or VAR_DIR / "lexical" / DATABASES["default"]["NAME"])
ANALYZER_STOPWORDS = env_list("ANALYZER_STOPWORDS")  # replaces Lucene's English stopwords when set
ANALYZER_EXTRA_STOPWORDS = env_list("ANALYZER_EXTRA_STOPWORDS")
# With filters, BM25 searches within the matching chunk ids when there are at most this many.
LEXICAL_FILTER_MAX_IDS = env_int("LEXICAL_FILTER_MAX_IDS", 50000)

# --- Hybrid search --------------------------------------------------------------------------
RRF_K = env_int("RRF_K", 60)
SEARCH_CANDIDATES = env_int("SEARCH_CANDIDATES", 100)  # per-retriever depth before fusion (tuned: docs/BENCHMARKS.md)
SEARCH_WEIGHTS = {
    "vector": float(env_str("SEARCH_WEIGHT_VECTOR", "1.0")),
    "bm25": float(env_str("SEARCH_WEIGHT_BM25", "1.0")),
}
# Dense weight for queries in a language the KB's embedding model does not cover (0 skips the leg).
DENSE_WEIGHT_FLOOR = float(env_str("DENSE_WEIGHT_FLOOR", "0.0"))

# --- Query expansion -------------------------------------------------------------------------
SPELLING_WEIGHT = float(env_str("SPELLING_WEIGHT", "0.7"))
LLM_URL = env_str("LLM_URL")  # OpenAI-compatible chat endpoint for optional query rewriting
LLM_MODEL = env_str("LLM_MODEL")
LLM_API_KEY = env_str("LLM_API_KEY")
LLM_TIMEOUT_S = float(env_str("LLM_TIMEOUT_S", "3.0"))
LLM_WEIGHT = float(env_str("LLM_WEIGHT", "0.6"))

# --- Reranking -------------------------------------------------------------------------------
RERANKER_URL = env_str("RERANKER_URL")  # remote /v1/rerank (llama.cpp, TEI, vLLM, Xinference, SiliconFlow)
RERANKER_MODEL = env_str("RERANKER_MODEL")  # or a local CrossEncoder folder
RERANKER_API_KEY = env_str("RERANKER_API_KEY")
RERANKER_TIMEOUT_S = float(env_str("RERANKER_TIMEOUT_S", "2.0"))
RERANKER_RETRIES = env_int("RERANKER_RETRIES", 1)
RERANKER_MAX_TOKENS = env_int("RERANKER_MAX_TOKENS", 256)
RERANK_TOP_N = env_int("RERANK_TOP_N", 30)  # only the head of the fused list is reranked

# json (default): one JSON object per line, for log shippers; text: for reading in a terminal.
# Every line carries the request id; retrieval.access logs one line per request.
LOG_FORMAT = env_str("LOG_FORMAT", "json").strip().lower()
if LOG_FORMAT not in ("json", "text"):
    raise ValueError(f"LOG_FORMAT must be 'json' or 'text', not {LOG_FORMAT!r}")
LOGGING = {
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
    "handlers": {"console": {"class": "logging.StreamHandler", "filters": ["request_id"], "formatter": LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"embedded_postgres": {"level": "WARNING"}},
}

# --- lifecycle (new) -------------------------------------------------------------------------
# Celery: broker and results on the cache's Redis (embedded by default), each in its own logical database.
from core.redis import celery_redis_url  # noqa: E402

CELERY_BROKER_URL = env_str("CELERY_BROKER_URL") or celery_redis_url(REDIS_URL, env_int("CELERY_BROKER_DB", 1))
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND") or celery_redis_url(
    REDIS_URL, env_int("CELERY_RESULT_DB", 2)
)
CELERY_TASK_SERIALIZER = CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True  # a task is acknowledged when it ends: a killed worker's task runs again
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1  # long tasks: a worker reserves one at a time
CELERY_TASK_TRACK_STARTED = True  # STARTED between PENDING and PROGRESS
CELERY_RESULT_EXPIRES = env_int("TASK_RESULT_TTL_S", 7 * 24 * 3600)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_CONCURRENCY = env_int("CELERY_CONCURRENCY", 1)
CELERY_WORKER_HIJACK_ROOT_LOGGER = False  # keep the JSON log lines of LOGGING
# A task taken by a worker that died (kill -9, lost machine) is handed out again this long after it was
# taken: longer than the longest task (a rebuild), or a slow task would run twice at once.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT_S", 3600),
    "unacked_restore_throttle": 1,  # look for such tasks every 10 s (and when a worker starts)
}
# Transient failures (database, Redis, remote embedder) retry with exponential backoff and jitter.
TASK_MAX_RETRIES = env_int("TASK_MAX_RETRIES", 5)
TASK_RETRY_BACKOFF_MAX_S = env_int("TASK_RETRY_BACKOFF_MAX_S", 300)
# Originals of ingested files, kept so a knowledge base can be rebuilt without its clients: any
# Django storage backend (e.g. S3-compatible through django-storages) by ORIGINALS_STORAGE_BACKEND.
ORIGINALS_DIR = Path(env_str("ORIGINALS_DIR") or VAR_DIR / "originals")
STORAGES["originals"] = {
    "BACKEND": env_str("ORIGINALS_STORAGE_BACKEND", "django.core.files.storage.FileSystemStorage"),
    "OPTIONS": {"location": str(ORIGINALS_DIR)} if not env_str("ORIGINALS_STORAGE_BACKEND") else {},
}
# Uploads (POST /api/v1/knowledge-bases/{id}/documents); MAX_REQUEST_BYTES bounds the other bodies.
UPLOAD_MAX_FILE_BYTES = env_int("UPLOAD_MAX_FILE_BYTES", 20 * 1024 * 1024)
UPLOAD_MAX_REQUEST_BYTES = env_int("UPLOAD_MAX_REQUEST_BYTES", 100 * 1024 * 1024)
# Documents and versions both have a "status": their enums get names of their own in the OpenAPI schema.
SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"] = {
    "DocumentStatusEnum": "knowledge.models.Document.Status",
    "VersionStatusEnum": "knowledge.models.KnowledgeBaseVersion.Status",
}
# Versions retired (or failed) longer than this are purged by the hourly beat task; until then a retired
# version can be activated again (rollback).
KB_VERSION_RETENTION_DAYS = env_int("KB_VERSION_RETENTION_DAYS", 7)
CELERY_BEAT_SCHEDULE = {
    "purge-old-versions": {"task": "knowledge.tasks.purge_versions", "schedule": 3600.0},
}
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
