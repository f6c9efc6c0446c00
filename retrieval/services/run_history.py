"""The console's run history: each retrieval-testing run kept per user, the oldest trimmed
(``retrieval.selectors.recent_runs`` reads it)."""

from __future__ import annotations

from django.contrib.auth.models import User

from retrieval.models import RetrievalRun
from retrieval.types import SearchResponse
from tenants.models import Tenant

HISTORY_PER_USER = 50  # runs kept per user; older ones are deleted as new ones come
TOP_HITS_KEPT = 5


def record_run(user: User, tenant: Tenant, params: dict[str, list[str]], response: SearchResponse) -> RetrievalRun:
    """Keep a run in the user's history (its form fields re-run it), trimming the oldest."""
    run = RetrievalRun.objects.create(
        user=user,
        tenant=tenant,
        query=params["query"][0],
        params=params,
        top_hits=[
            {"chunk_id": hit.chunk_id, "title": hit.title, "score": hit.score}
            for hit in response.results[:TOP_HITS_KEPT]
        ],
        timings_ms=response.timings_ms,
    )
    stale = RetrievalRun.objects.filter(user=user).values_list("pk", flat=True)[HISTORY_PER_USER:]
    RetrievalRun.objects.filter(pk__in=list(stale)).delete()
    return run
