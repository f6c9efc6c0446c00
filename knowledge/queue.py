"""Queueing knowledge tasks by name once the transaction commits (the worker must see the rows).

``knowledge.tasks`` (and the graph app's ``graph.tasks``) register their tasks here when imported (the
apps' ``ready``), so the writes that queue work never import the tasks that call them.
"""

from __future__ import annotations

import uuid
from typing import Protocol

from django.db import transaction

from core.uniqueness import redrawn_on_collision
from knowledge.models import KnowledgeBase, KnowledgeTask


class _Task(Protocol):
    """What queueing uses of a Celery task (``celery.Task``; Celery ships no types)."""

    name: str

    def apply_async(self, args: tuple[object, ...], *, task_id: str | None = None) -> object: ...


_TASKS: list[_Task] = []
TASK_ID_UNIQUE = "knowledge_knowledgetask_task_id_key"  # PostgreSQL's name for the column's UNIQUE


def register(*tasks: _Task) -> None:
    """Make Celery tasks queueable by their names (``knowledge.tasks.ingest_documents``). Their names are
    read when one is sent: reading one binds the Celery app, which would start the embedded broker."""
    _TASKS.extend(tasks)


def enqueue(name: str, args: tuple[object, ...], *, task_id: str | None = None, robust: bool = False) -> None:
    """Send task ``name`` once the transaction commits (at once outside one). ``robust``: a failure to
    send (the broker down) is logged, not raised, and the work is left to a periodic task."""
    task = next((task for task in _TASKS if task.name == name), None)
    if task is None:
        raise LookupError(f"no task {name!r} is registered (knowledge.tasks registers them when imported)")
    transaction.on_commit(lambda: task.apply_async(args, task_id=task_id), robust=robust)


def queue_task(kb: KnowledgeBase, kind: str, name: str, args: tuple[object, ...]) -> KnowledgeTask:
    """Record task ``name`` for the KB's tenant, who can follow it, then send it once the transaction commits."""
    record = redrawn_on_collision(
        TASK_ID_UNIQUE,
        lambda: KnowledgeTask.objects.create(
            task_id=str(uuid.uuid4()), tenant_id=kb.tenant_id, knowledge_base=kb, kind=kind
        ),
    )
    enqueue(name, args, task_id=record.task_id)
    return record
