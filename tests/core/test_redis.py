"""core.redis: Celery's spelling of the cache's Redis."""
import pytest

from core.redis import celery_redis_url


@pytest.mark.parametrize(
    ("cache_url", "expected"),
    [
        ("unix:///srv/var/redis/redis.sock?db=0", "redis+socket:///srv/var/redis/redis.sock?virtual_host=2"),
        ("redis://cache.internal:6379/0", "redis://cache.internal:6379/2"),
        ("rediss://:secret@cache.internal:6380", "rediss://:secret@cache.internal:6380/2"),
        ("redis://cache.internal:6379/0?socket_timeout=1", "redis://cache.internal:6379/2?socket_timeout=1"),
    ],
)
def test_celery_gets_the_same_server_on_its_own_database(cache_url, expected):
    assert celery_redis_url(cache_url, 2) == expected


def test_the_configured_broker_and_results_reach_the_embedded_redis(settings):
    from retrieval_site.celery import app

    with app.connection_for_write() as connection:
        connection.ensure_connection(max_retries=1)
        assert connection.default_channel.client.ping()
    assert app.backend.client.ping()
    assert settings.CELERY_BROKER_URL != settings.CELERY_RESULT_BACKEND  # separate logical databases
