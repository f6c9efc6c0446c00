"""gunicorn settings for `./run serve` and docker-compose; the command line may override them."""
import os

# Web workers answer many small queries at once: one torch thread each beats two fighting over 2
# cores (measured under load: ~9 vs ~1 vector queries/s). Ingestion commands keep all cores.
os.environ.setdefault("TORCH_THREADS", "1")


def post_worker_init(worker):
    # Each worker loads the model before it takes requests, so no request pays for it.
    from retrieval.warmup import warm_up

    warm_up()
