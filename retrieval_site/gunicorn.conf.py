"""gunicorn settings for `./run serve` and docker-compose; the command line may override them."""

import os

# Web workers answer many small queries at once: one torch thread each beats two fighting over 2
# cores (measured under load: ~9 vs ~1 vector queries/s). Ingestion commands keep all cores.
os.environ.setdefault("TORCH_THREADS", "1")

# The asyncio worker reads requests on its event loop and hands them whole to Django's WEB_THREADS
# threads: a slow or idle client holds a coroutine, not a thread (docs/api.md: Reliability). It answers
# malformed HTTP with the service's JSON errors.
wsgi_app = "retrieval_site.asgi:application"
worker_class = "core.gunicorn_worker.Worker"
worker_connections = 1000  # open connections per worker, slow ones included
keepalive = 5  # seconds an idle keep-alive connection (or the next request's headers) may take

# gunicorn 25+ opens a control socket (for `gunicornc`) under $HOME by default; the service does
# not use it, and a server started from the project should not write outside it.
control_socket_disable = True


def post_worker_init(worker: object) -> None:
    # Each worker loads the model before it takes requests, so no request pays for it.
    from retrieval.warmup import warm_up

    warm_up()
