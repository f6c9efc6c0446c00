"""Settings. Every environment variable the service reads is a field of :class:`Environment` below.

Each field names its variable, its type (parsed by pydantic-settings: an unparsable or out-of-range
value stops startup with an error naming the variable) and its one default; empty counts as unset.
Every field is also a Django setting of the same name, so code reads ``settings.X`` only. Fields
marked ``Ranks`` change rankings: the search cache key includes them (``RANKING_SETTINGS``).

Importing this module starts no server. With no ``DATABASE_URL`` the database backend
``core.embedded_postgres`` starts (or attaches to) an embedded PostgreSQL 18 + pgvector under
``var/`` on its first connection; with one it uses that server. Same migrations, same code.
Likewise ``REDIS_URL``: unset, the cache starts an embedded Redis on a unix socket under ``var/``
when it first connects.
"""
from __future__ import annotations

import ipaddress
import os
import secrets
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from pydantic import AfterValidator, BeforeValidator, Field, NonNegativeFloat, NonNegativeInt, PositiveFloat
from pydantic import PositiveInt, ValidationError
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from core.embedded_postgres import EMBEDDED_DATABASE, EMBEDDED_USER
from core.redis import celery_redis_url, embedded_redis_location

BASE_DIR = Path(__file__).resolve().parent.parent


class Ranks:
    """Marks a variable that changes rankings: a search cached under another value is not reused."""


def _comma_list(value: object) -> object:
    return [item.strip() for item in value.split(",") if item.strip()] if isinstance(value, str) else value


def _url(*schemes: str) -> AfterValidator:
    """Accepts unset ("") or a URL with one of ``schemes``."""

    def check(value: str) -> str:
        parts = urlsplit(value)
        if value and (parts.scheme not in schemes or not (parts.netloc or parts.path)):
            raise ValueError(f"expected a {' or '.join(f'{scheme}://' for scheme in schemes)} URL")
        return value

    return AfterValidator(check)


def _physical_memory_mb() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20


def _networks(values: list[str]) -> list[str]:
    for value in values:
        ipaddress.ip_network(value, strict=False)  # a typo fails at startup, not at the first scrape
    return values


def _database_url(value: str) -> str:
    if value and dj_database_url.parse(value).get("OPTIONS", {}).get("server_side_binding"):  # unknown schemes raise
        # A vector search sends its planner settings and its query in one message, which PostgreSQL
        # accepts only as a simple query: client-side binding (psycopg's and Django's default).
        raise ValueError("server_side_binding is not supported: vector search needs client-side binding")
    return value


def _database_name(url: str) -> str:
    return dj_database_url.parse(url)["NAME"] if url else EMBEDDED_DATABASE


def _local_secret_key(var_dir: Path) -> str:
    """A per-checkout random key for local runs; production sets DJANGO_SECRET_KEY."""
    path = var_dir / "secret_key"
    if not path.exists():
        var_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


# "a,b" in the environment (pydantic-settings would otherwise expect JSON for a list).
CommaList = Annotated[list[str], NoDecode, BeforeValidator(_comma_list)]
HttpUrlOrUnset = Annotated[str, _url("http", "https")]


class Environment(BaseSettings):
    """The environment variables, grouped by concern; the README's Configuration table lists them all."""

    model_config = SettingsConfigDict(case_sensitive=True, env_ignore_empty=True, frozen=True)

    # --- Django and HTTP ----------------------------------------------------------------------
    VAR_DIR: Path = BASE_DIR / "var"  # local state: embedded servers, indexes, static files, secret key
    SECRET_KEY: str = Field(
        validation_alias="DJANGO_SECRET_KEY", default_factory=lambda data: _local_secret_key(data["VAR_DIR"])
    )
    DEBUG: bool = Field(False, validation_alias="DJANGO_DEBUG")
    ALLOWED_HOSTS: CommaList = Field(["127.0.0.1", "localhost", "testserver"], validation_alias="DJANGO_ALLOWED_HOSTS")
    CSRF_TRUSTED_ORIGINS: CommaList = Field([], validation_alias="DJANGO_CSRF_TRUSTED_ORIGINS")
    # Search requests are small; anything larger is refused with 413 before it is parsed.
    DATA_UPLOAD_MAX_MEMORY_SIZE: PositiveInt = Field(256 * 1024, validation_alias="MAX_REQUEST_BYTES")
    CORS_ALLOWED_ORIGINS: CommaList = []  # e.g. https://app.example.com; empty: no cross-origin calls
    # json: one JSON object per line, for log shippers; text: for reading in a terminal.
    LOG_FORMAT: Annotated[Literal["json", "text"], BeforeValidator(lambda value: value.strip().lower())] = "json"
    LOG_LEVEL: Annotated[
        Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], BeforeValidator(lambda value: value.strip().upper())
    ] = "INFO"
    # /metrics answers these addresses or networks (the TCP peer, not X-Forwarded-For), or any
    # client sending "Authorization: Bearer <METRICS_TOKEN>" when a token is set.
    METRICS_ALLOWED_IPS: Annotated[CommaList, AfterValidator(_networks)] = ["127.0.0.1", "::1"]
    METRICS_TOKEN: str = ""

    # --- Database -----------------------------------------------------------------------------
    DATABASE_URL: Annotated[str, AfterValidator(_database_url)] = ""  # unset: the embedded server
    EMBEDDED_PG_DIR: Path = Field(default_factory=lambda data: data["VAR_DIR"] / "pgdata")
    # The embedded server's memory (ignored with DATABASE_URL), applied when it starts: its buffer cache
    # should hold the HNSW index and the rows a search reads (~400 MB at 100k chunks); the default is a
    # 16th of this machine's memory within 128-1024 MB. The planner's estimate of all caches: half of it.
    EMBEDDED_PG_SHARED_BUFFERS_MB: PositiveInt = Field(
        default_factory=lambda: min(1024, max(128, _physical_memory_mb() // 16))
    )
    EMBEDDED_PG_EFFECTIVE_CACHE_SIZE_MB: PositiveInt = Field(
        default_factory=lambda: max(512, _physical_memory_mb() // 2)
    )
    DB_CONN_MAX_AGE: NonNegativeInt = 60
    TEST_DATABASE_NAME: str = "test_retrieval"

    # --- Serving (retrieval_site.asgi under gunicorn's asyncio worker) -------------------------
    WEB_THREADS: PositiveInt = 4  # threads per worker that run Django, each on a request already read
    # A connection's request headers, and then a request's body, must arrive within these (else 408).
    REQUEST_HEADER_TIMEOUT_S: PositiveFloat = 10.0
    REQUEST_BODY_TIMEOUT_S: PositiveFloat = 60.0

    # --- Redis: result cache, rate-limit counters, idempotency records ------------------------
    REDIS_URL: Annotated[str, _url("redis", "rediss", "unix")] = ""  # unset: the embedded server
    EMBEDDED_REDIS_DIR: Path = Field(default_factory=lambda data: data["VAR_DIR"] / "redis")
    REDIS_TIMEOUT_S: PositiveFloat = 0.5  # short: a Redis outage degrades, never stalls
    SEARCH_CACHE_TTL_S: NonNegativeInt = 3600  # 0 disables the result cache
    SEARCH_CACHE_WAIT_S: NonNegativeFloat = 2.0  # identical misses wait this long for the first
    # Each process remembers usable API keys this long: a revocation elsewhere takes up to this to apply.
    API_KEY_CACHE_TTL_S: NonNegativeInt = 5
    # Each process sends its searches' usage counters (the dashboard's) to Redis this often, summed.
    USAGE_COUNTERS_FLUSH_S: NonNegativeFloat = 1.0  # 0: one round trip per search, after its answer
    # Tiers live in the database (admin: Rate tiers); counters are fixed windows of this length.
    RATE_LIMIT_WINDOW_S: PositiveInt = 60
    RATE_LIMIT_FAIL_OPEN: bool = True  # Redis down: serve (true) or 503 (false)
    RATE_LIMIT_ANONYMOUS: NonNegativeInt = 100  # per client IP and window, no key or a bad one
    IDEMPOTENCY_TTL_S: PositiveInt = 24 * 3600  # how long a stored response is replayed
    IDEMPOTENCY_LOCK_TTL_S: PositiveInt = 120  # in-flight marker; outlives any request

    # --- Embeddings and vector search ---------------------------------------------------------
    # A name from the bundled aliases (all-MiniLM-L6-v2), a sentence-transformers model folder, or,
    # with EMBEDDING_URL set, the model name sent to that OpenAI-compatible /v1/embeddings endpoint.
    EMBEDDING_MODEL: str = "all-MiniLM-L6-v2"
    EMBEDDING_URL: Annotated[HttpUrlOrUnset, Ranks] = ""
    EMBEDDING_API_KEY: str = ""
    EMBEDDING_TIMEOUT_S: PositiveFloat = 30.0
    EMBEDDING_BATCH_SIZE: PositiveInt = 32
    # Languages of a model the service does not know, e.g. "zh,en": they decide its dense weight.
    EMBEDDING_LANGUAGES: Annotated[CommaList, Ranks] = []
    # gunicorn.conf.py makes it 1 in web workers; other processes (ingest, evaluate) use every core.
    TORCH_THREADS: PositiveInt = Field(default_factory=lambda: os.cpu_count() or 1)
    # Runtime of a local model named without a runtime suffix (':torch', ':onnx', ':onnx-int8'): onnx
    # (ONNX Runtime, fp32: the torch vectors within float rounding, ~3x faster per query) or torch.
    EMBEDDING_BACKEND: Annotated[
        Literal["onnx", "torch"], BeforeValidator(lambda value: value.strip().lower()), Ranks
    ] = "onnx"
    # Exported (and quantized) ONNX graphs, one folder per hash of the model files + export settings.
    ONNX_CACHE_DIR: Path = Field(default_factory=lambda data: data["VAR_DIR"] / "onnx")
    # Threads per process; like TORCH_THREADS (its default): 1 in gunicorn workers, all cores otherwise. One batch
    # (a query) runs on this many intra-op threads; several (an ingestion group) run side by side, one thread each.
    ONNX_THREADS: PositiveInt = Field(default_factory=lambda data: data["TORCH_THREADS"])
    # Texts per ONNX Runtime call (sorted by length first, so they pad little): small batches keep a
    # layer's activations in the CPU cache; 4 ran 1.14x (fp32) and 1.2x (int8) the passages per CPU
    # second of 32 (docs/BENCHMARKS.md, "Ingestion pipeline"). torch and remote calls use EMBEDDING_BATCH_SIZE.
    ONNX_BATCH_SIZE: PositiveInt = 4
    CHUNK_SIZE_TOKENS: PositiveInt = 200  # for new KBs
    CHUNK_OVERLAP_TOKENS: NonNegativeInt = 32
    # Up to this many matching rows a search scans them exactly instead of walking HNSW, in an index of
    # 100k rows; above that the limit grows with the square root of the index's rows (12,649 at 1M).
    VECTOR_EXACT_SCAN_THRESHOLD: Annotated[NonNegativeInt, Ranks] = 4000
    # hnsw.ef_search of a vector search: the larger of this and twice the leg's depth (candidates).
    HNSW_EF_SEARCH: Annotated[PositiveInt, Ranks] = 100

    # --- Lexical search -----------------------------------------------------------------------
    ELASTICSEARCH_URL: Annotated[HttpUrlOrUnset, Ranks] = ""  # set: Elasticsearch; unset: embedded tantivy
    ELASTICSEARCH_INDEX_PREFIX: str = "retrieval"
    # tantivy indexes live per database, so test databases never read the service's indexes.
    LEXICAL_INDEX_DIR: Path = Field(
        default_factory=lambda data: data["VAR_DIR"] / "lexical" / _database_name(data["DATABASE_URL"])
    )
    ANALYZER_STOPWORDS: Annotated[CommaList, Ranks] = []  # replaces Lucene's English stopwords when set
    ANALYZER_EXTRA_STOPWORDS: Annotated[CommaList, Ranks] = []
    # With filters, BM25 searches within the matching chunk ids when there are at most this many; above,
    # it searches deeper without them and filters its hits (slower at 10,000 ids: docs/BENCHMARKS.md).
    LEXICAL_FILTER_MAX_IDS: Annotated[PositiveInt, Ranks] = 50_000

    # --- Hybrid search ------------------------------------------------------------------------
    RRF_K: Annotated[PositiveInt, Ranks] = 60
    SEARCH_CANDIDATES: Annotated[PositiveInt, Ranks] = 100  # per-retriever depth (tuned: docs/BENCHMARKS.md)
    SEARCH_WEIGHT_VECTOR: NonNegativeFloat = 1.0  # read as SEARCH_WEIGHTS (below)
    SEARCH_WEIGHT_BM25: NonNegativeFloat = 1.0
    SEARCH_WEIGHT_GRAPH: NonNegativeFloat = 1.0  # the graph leg's weight in graph mode
    # The graph list's weight in three-way hybrid ("graph": true); measured in docs/BENCHMARKS.md.
    SEARCH_WEIGHT_GRAPH_HYBRID: Annotated[NonNegativeFloat, Ranks] = 0.1
    # Dense weight for queries in a language the KB's embedding model does not cover (0 skips the leg).
    DENSE_WEIGHT_FLOOR: Annotated[NonNegativeFloat, Ranks] = 0.0

    # --- Graph retrieval ----------------------------------------------------------------------
    GRAPH_HOPS: Annotated[int, Field(ge=0, le=3), Ranks] = 2  # default neighbourhood of the query's entities
    # Three-way hybrid: a passage in another leg's top N scores as the graph's first; the graph orders the rest.
    GRAPH_FUSION_HEAD: Annotated[NonNegativeInt, Ranks] = 10
    GRAPH_HOP_DECAY: Annotated[float, Field(gt=0, le=1), Ranks] = 0.5  # score factor per hop
    GRAPH_FANOUT: Annotated[PositiveInt, Ranks] = 20  # a walk follows each entity's strongest relations only
    GRAPH_DEEP_FANOUT: Annotated[PositiveInt, Ranks] = 5  # ... and of each entity beyond the query's
    GRAPH_HUB_PASSAGES: Annotated[PositiveInt, Ranks] = 1_000  # a walk stops at entities in more passages
    GRAPH_FRONTIER: Annotated[PositiveInt, Ranks] = 20  # entities of a hop the next walks from: the best-scored
    GRAPH_MAX_ENTITIES: Annotated[PositiveInt, Ranks] = 30  # reached entities whose passages are read
    GRAPH_CHUNKS_PER_ENTITY: Annotated[PositiveInt, Ranks] = 50  # passages read per reached entity
    # A misspelt Latin name of the query finds the entity this similar (trigrams, 0-1); 0: exact names only.
    GRAPH_FUZZY_SIMILARITY: Annotated[float, Field(ge=0, le=1), Ranks] = 0.6
    # Typed relations at ingestion from the LLM (LLM_URL, LLM_MODEL): one call per document, bounded.
    GRAPH_LLM_TRIPLES: bool = False  # off: co-occurrence relations only
    GRAPH_LLM_DEADLINE_S: PositiveFloat = 30.0  # the whole call of one document
    GRAPH_LLM_MAX_INPUT_CHARS: PositiveInt = 12_000  # passages sent per document; the rest keep co-occurrence
    GRAPH_LLM_MAX_OUTPUT_TOKENS: PositiveInt = 2_000  # the answer's cap (max_tokens)
    GRAPH_LLM_SUMMARIES: bool = False  # community summaries by the LLM instead of extractive ones
    GRAPH_LLM_MAX_SUMMARIES: PositiveInt = 200  # per rebuild: the biggest communities first; the rest extractive
    # Communities (Leiden), rebuilt by a task after each ingestion and version build.
    GRAPH_COMMUNITY_LEVELS: Annotated[int, Field(ge=1, le=4)] = 2  # levels of the hierarchy
    GRAPH_COMMUNITY_SPLIT_SIZE: PositiveInt = 30  # a community above this many entities gets a level below
    GRAPH_COMMUNITY_MIN_SIZE: Annotated[int, Field(ge=2)] = 3  # smaller groups of entities are no community
    GRAPH_COMMUNITY_RESOLUTION: PositiveFloat = 1.0  # Leiden's resolution: higher, smaller communities
    NEO4J_URL: str = ""  # neo4j://user:password@host:7687: the graph in Neo4j; unset: PostgreSQL tables
    NEO4J_TIMEOUT_S: PositiveFloat = 2.0  # connect, acquire and per-query transaction deadline

    # --- Query expansion ----------------------------------------------------------------------
    SPELLING_WEIGHT: Annotated[NonNegativeFloat, Ranks] = 0.7
    SPELLING_MAX_VOCABULARY: Annotated[PositiveInt, Ranks] = 50_000  # a KB's most frequent terms it knows
    LLM_URL: Annotated[HttpUrlOrUnset, Ranks] = ""  # OpenAI-compatible chat endpoint for optional query rewriting
    LLM_MODEL: Annotated[str, Ranks] = ""
    LLM_API_KEY: str = ""
    LLM_TIMEOUT_S: PositiveFloat = 3.0
    LLM_WEIGHT: Annotated[NonNegativeFloat, Ranks] = 0.6

    # --- Reranking ----------------------------------------------------------------------------
    RERANKER_URL: Annotated[HttpUrlOrUnset, Ranks] = ""  # remote /v1/rerank (llama.cpp, TEI, vLLM, Xinference)
    RERANKER_MODEL: Annotated[str, Ranks] = ""  # or a local CrossEncoder folder
    RERANKER_API_KEY: str = ""
    RERANKER_TIMEOUT_S: PositiveFloat = 2.0
    RERANKER_RETRIES: NonNegativeInt = 1
    RERANKER_MAX_TOKENS: Annotated[PositiveInt, Ranks] = 256
    RERANK_TOP_N: Annotated[PositiveInt, Ranks] = 30  # only the head of the fused list is reranked
    # Total time each optional remote stage of a search may take (reranker, LLM expander, Elasticsearch):
    # connect, send, every read and every retry together. A stage that misses it is degraded ("deadline").
    SEARCH_DEADLINE_MS: PositiveInt = 2000

    # --- Celery: broker and results on the cache's Redis (embedded by default), each in its own logical
    # database, unless given URLs of their own.
    CELERY_BROKER_URL: str = ""
    CELERY_RESULT_BACKEND: str = ""
    CELERY_BROKER_DB: NonNegativeInt = 1
    CELERY_RESULT_DB: NonNegativeInt = 2
    CELERY_CONCURRENCY: PositiveInt = 1  # worker processes of `./run serve`'s worker
    # A task taken by a worker that died (kill -9, lost machine) is handed out again this long after it
    # was taken: longer than the longest task (a version build), or a slow task would run twice at once.
    CELERY_VISIBILITY_TIMEOUT_S: PositiveInt = 3600
    TASK_RESULT_TTL_S: PositiveInt = 7 * 24 * 3600
    # Transient failures (database, Redis, remote embedder) retry with exponential backoff and jitter.
    TASK_MAX_RETRIES: NonNegativeInt = 5
    TASK_RETRY_BACKOFF_MAX_S: PositiveInt = 300
    # Originals of ingested files, kept so a knowledge base can be rebuilt without its clients: any Django
    # storage backend (e.g. S3-compatible through django-storages); unset, files under ORIGINALS_DIR.
    ORIGINALS_DIR: Path = Field(default_factory=lambda data: data["VAR_DIR"] / "originals")
    ORIGINALS_STORAGE_BACKEND: str = ""
    # Uploads (POST /api/v1/knowledge-bases/{id}/documents); MAX_REQUEST_BYTES bounds the other bodies.
    UPLOAD_MAX_FILE_BYTES: PositiveInt = 20 * 1024 * 1024
    UPLOAD_MAX_REQUEST_BYTES: PositiveInt = 100 * 1024 * 1024
    # Versions retired (or failed) longer than this are purged by the hourly beat task; until then a
    # retired version can be activated again (rollback).
    KB_VERSION_RETENTION_DAYS: NonNegativeInt = 7
    # Search analytics (retrieval.search_log): each tenant's queries (text, mode, KBs, hit count, best
    # relevance, leg agreement; no key, no client) are kept this long, then purged by the hourly beat task.
    # A tenant's "record searches" switch (the admin) turns it off for that tenant; SEARCH_LOG_ENABLED
    # false for every tenant (bench/hybrid_ab.py compares the two).
    SEARCH_LOG_ENABLED: bool = True
    SEARCH_LOG_RETENTION_DAYS: NonNegativeInt = 30
    # They are written off the request thread: a queue of at most this many waits for the writer, which
    # inserts up to SEARCH_LOG_BATCH_SIZE rows at a time, at least every SEARCH_LOG_FLUSH_S seconds. A full
    # queue drops the search's row (counted in retrieval_search_log_dropped) rather than wait.
    # SEARCH_LOG_FLUSH_S 0: no writer thread (rows wait for retrieval.search_log.flush(): tests).
    SEARCH_LOG_QUEUE_SIZE: PositiveInt = 10_000
    SEARCH_LOG_BATCH_SIZE: PositiveInt = 500
    SEARCH_LOG_FLUSH_S: NonNegativeFloat = 1.0
    # Folder sources (POST /api/v1/knowledge-bases/{id}/sources) must lie under one of these folders; a
    # relative source path is taken from the first. Relative roots are taken from the project folder.
    KNOWLEDGE_SOURCE_ROOTS: CommaList = ["var/sources"]
    # A document whose file or URL left its source stops being searched at once; its row and stored
    # original are purged this long after (the hourly beat task), so a file that comes back keeps its id.
    SOURCE_REMOVAL_GRACE_HOURS: NonNegativeInt = 24
    # URL sources: each fetch (redirects included) within this total time and size.
    SOURCE_URL_TIMEOUT_S: PositiveFloat = 30.0
    SOURCE_URL_MAX_BYTES: PositiveInt = 20 * 1024 * 1024
    # URL sources never reach private, loopback or link-local addresses (nor redirect there), except
    # in these networks, e.g. 10.1.0.0/16 for an intranet wiki (tests allow 127.0.0.1/32).
    SOURCE_URL_ALLOWED_NETWORKS: Annotated[CommaList, AfterValidator(_networks)] = []

    # --- Redis circuit breaker: after this many timeouts or connection errors within the window, Redis
    # is skipped (cache, rate limits per RATE_LIMIT_FAIL_OPEN, idempotency, counters) for the cool-down.
    REDIS_BREAKER_FAILURES: PositiveInt = 5
    REDIS_BREAKER_WINDOW_S: PositiveFloat = 10.0
    REDIS_BREAKER_COOLDOWN_S: PositiveFloat = 5.0

    # --- OpenTelemetry traces (core.tracing) --------------------------------------------------
    # Off unless an OTLP endpoint is set or OTEL_TRACES_EXPORTER is console/otlp; off costs nothing
    # (the middleware removes itself, spans are one shared no-op).
    OTEL_EXPORTER_OTLP_ENDPOINT: HttpUrlOrUnset = ""  # e.g. http://otel-collector:4318
    OTEL_TRACES_EXPORTER: Annotated[
        Literal["", "otlp", "console", "none"], BeforeValidator(lambda value: value.strip().lower())
    ] = ""
    OTEL_SERVICE_NAME: str = "retrieval-service"
    OTEL_EXPORTER_OTLP_TIMEOUT_S: PositiveFloat = 10.0

    # --- Crash tests --------------------------------------------------------------------------
    # Stops an ingesting process at a boundary of the commit protocol of rows and keyword index, to be
    # killed there (knowledge.services.pause_at); empty, the only value outside tests, does nothing.
    CRASH_TEST_PAUSE_AT: Literal["", "rows_written", "rows_committed", "index_committed"] = ""

    @classmethod
    def variables(cls) -> list[str]:
        """The names of the environment variables read, in order."""
        return [field.validation_alias or name for name, field in cls.model_fields.items()]

    @classmethod
    def ranking(cls) -> tuple[str, ...]:
        """The settings marked ``Ranks``."""
        return tuple(name for name, field in cls.model_fields.items() if Ranks in field.metadata)


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


env = read_environment()
globals().update(env.model_dump())  # every field is a Django setting of the same name

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
if env.DATABASE_URL:
    DATABASES = {"default": dj_database_url.parse(env.DATABASE_URL, conn_max_age=env.DB_CONN_MAX_AGE)}
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
# pgvector 0.8: keep scanning the HNSW graph until enough rows pass the SQL filters.
DATABASES["default"]["OPTIONS"]["options"] = "-c hnsw.iterative_scan=relaxed_order"
DATABASES["default"]["TEST"] = {"NAME": env.TEST_DATABASE_NAME}

# --- Redis: result cache, rate-limit counters, idempotency records ----------------------------
REDIS_URL = env.REDIS_URL or embedded_redis_location(env.EMBEDDED_REDIS_DIR)
CACHES = {
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
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

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
    "handlers": {"console": {"class": "logging.StreamHandler", "filters": ["request_id"], "formatter": env.LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": env.LOG_LEVEL},
    "loggers": {"embedded_postgres": {"level": "WARNING"}},
}

# --- Traces: log lines carry trace_id and span_id beside request_id while tracing is on -------
MIDDLEWARE.insert(MIDDLEWARE.index("core.request_id.RequestIdMiddleware") + 1, "core.tracing.TracingMiddleware")
if (env.OTEL_EXPORTER_OTLP_ENDPOINT or env.OTEL_TRACES_EXPORTER) and env.OTEL_TRACES_EXPORTER != "none":
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
}
