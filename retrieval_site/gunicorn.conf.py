"""gunicorn settings for `./run serve` and docker-compose; the command line may override them."""


def post_worker_init(worker):
    # Each worker loads the model before it takes requests, so no request pays for it.
    from retrieval.warmup import warm_up

    warm_up()
