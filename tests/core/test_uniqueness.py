"""core.uniqueness.get_or_create_serialized on django-celery-beat's schedule table, which has no unique
constraint: two creators of one schedule race for real on their own connections and make one row."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django_celery_beat.models import IntervalSchedule

from core.uniqueness import _GET_OR_CREATE_LOCK_CLASS, get_or_create_serialized
from tests.concurrency import RACE_TIMEOUT_S, race, wait_until


def waiting_for_the_lock() -> bool:
    """A connection waits for a get_or_create_serialized turn (an advisory lock of its class, not granted)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND NOT granted",
            [_GET_OR_CREATE_LOCK_CLASS],
        )
        return cursor.fetchone()[0] > 0


@pytest.mark.django_db(transaction=True)
def test_two_creators_of_one_schedule_make_one_row(monkeypatch):
    """The first creator's insert is held, uncommitted, until the second is seen waiting for its turn;
    a check-then-insert (``get_or_create``) would not wait, find nothing and insert a second row."""
    inserting, release = threading.Event(), threading.Event()
    save = IntervalSchedule.save

    def held_save(self, *args, **kwargs):
        if not inserting.is_set():
            inserting.set()
            assert release.wait(RACE_TIMEOUT_S)
        return save(self, *args, **kwargs)

    monkeypatch.setattr(IntervalSchedule, "save", held_save)

    def first():
        return get_or_create_serialized(IntervalSchedule, every=3600, period=IntervalSchedule.SECONDS)

    def second():
        assert inserting.wait(RACE_TIMEOUT_S)  # the first holds its turn, its row not yet committed
        return get_or_create_serialized(IntervalSchedule, every=3600, period=IntervalSchedule.SECONDS)

    def referee():
        try:
            wait_until(waiting_for_the_lock, message="the second creator to wait for its turn")
        finally:
            release.set()

    made, found, _ = race(first, second, referee)
    assert isinstance(made, IntervalSchedule) and isinstance(found, IntervalSchedule), (made, found)
    assert found.pk == made.pk
    assert IntervalSchedule.objects.filter(every=3600, period=IntervalSchedule.SECONDS).count() == 1


@pytest.mark.django_db
def test_duplicates_made_before_are_tolerated_the_oldest_is_used():
    older, _ = (IntervalSchedule.objects.create(every=77, period=IntervalSchedule.SECONDS) for _ in range(2))
    assert get_or_create_serialized(IntervalSchedule, every=77, period=IntervalSchedule.SECONDS).pk == older.pk
    created = get_or_create_serialized(IntervalSchedule, every=78, period=IntervalSchedule.SECONDS)
    assert IntervalSchedule.objects.filter(every=78).get().pk == created.pk
