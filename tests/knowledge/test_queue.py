"""knowledge.queue: a task's row, with an id unique in the database, then the task sent."""

import uuid

import pytest

from knowledge import queue
from knowledge.models import KnowledgeTask
from tests.concurrency import race


@pytest.mark.django_db(transaction=True)
def test_two_tasks_drawing_one_id_at_once_are_both_recorded_with_distinct_ids(kb, monkeypatch):
    """A uuid4 repeats about never; when it does, the task whose insert lost draws again."""
    repeated, draws = uuid.uuid4(), []

    def same_first_id():
        draws.append(None)
        return repeated if len(draws) <= 2 else uuid.UUID(int=len(draws))

    monkeypatch.setattr(queue.uuid, "uuid4", same_first_id)
    sent = []
    monkeypatch.setattr(queue, "enqueue", lambda name, args, *, task_id: sent.append(task_id))
    kind = KnowledgeTask.Kind.INGEST
    outcomes = race(*[lambda: queue.queue_task(kb, kind, "knowledge.tasks.ingest_documents", ())] * 2)
    assert all(isinstance(outcome, KnowledgeTask) for outcome in outcomes), outcomes
    ids = sorted(outcome.task_id for outcome in outcomes)
    assert str(repeated) in ids and len(set(ids)) == 2 and len(draws) == 3
    assert sorted(sent) == ids == sorted(KnowledgeTask.objects.values_list("task_id", flat=True))
