"""Dense search in PostgreSQL + pgvector.

Filters are applied in SQL. HNSW with ``hnsw.iterative_scan = relaxed_order`` (set on every
connection) keeps walking the graph until enough rows pass them; when few rows match, an exact scan
over those rows is both faster and exact, so the planner is steered to it.
"""
from __future__ import annotations

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.db.models.functions import Cast
from pgvector.django import CosineDistance, VectorField

from knowledge.models import Chunk
from retrieval.engines.base import SearchScope, VectorHit, VectorIndex
from retrieval.filters import CompiledFilter


class PgVectorIndex(VectorIndex):
    def __init__(self, *, exact_scan_threshold: int | None = None, ef_search: int | None = None):
        self.exact_scan_threshold = (
            settings.VECTOR_EXACT_SCAN_THRESHOLD if exact_scan_threshold is None else exact_scan_threshold
        )
        self.ef_search = settings.HNSW_EF_SEARCH if ef_search is None else ef_search

    def plan(self, scope: SearchScope, filters: CompiledFilter) -> int:
        """How many rows are in scope, counted up to one past the exact-scan threshold."""
        return self._candidates(scope, filters).order_by().values("id")[: self.exact_scan_threshold + 1].count()

    def search(
        self, scope: SearchScope, query_vector: np.ndarray, top_k: int, filters: CompiledFilter, plan: int | None = None
    ) -> list[VectorHit]:
        matching = self.plan(scope, filters) if plan is None else plan
        if matching == 0:
            return []
        exact = matching <= self.exact_scan_threshold
        # The cast matches the per-dimension partial HNSW index expression.
        distance = CosineDistance(Cast("embedding", VectorField(dimensions=scope.embedding_dim)), query_vector)
        nearest = (
            self._candidates(scope, filters)
            .annotate(distance=distance)
            .order_by("distance")
            .values_list("id", "distance", "content_hash")
        )
        # Planner settings made with set_config(..., true) end with the outermost transaction: when
        # this one is it, COMMIT restores them; inside a caller's transaction they are put back.
        restore = connection.in_atomic_block
        with transaction.atomic():
            try:
                self._set_planner(exact=exact, top_k=top_k)
                rows = list(nearest[:top_k])
                if not exact and len(rows) < top_k:
                    # The graph walk hit its scan budget before finding enough rows; be exact instead.
                    self._set_planner(exact=True, top_k=top_k)
                    rows = list(nearest[:top_k])
            finally:
                if restore:
                    self._set_planner(exact=False, top_k=top_k)
        # relaxed_order may return rows slightly out of order.
        rows.sort(key=lambda row: row[1])
        return [VectorHit(chunk_id, 1.0 - float(dist), content_hash) for chunk_id, dist, content_hash in rows]

    @staticmethod
    def _candidates(scope: SearchScope, filters: CompiledFilter):
        return filters.apply(
            Chunk.objects.filter(
                tenant_id=scope.tenant_id, kb_version_id__in=scope.version_ids, embedding_dim=scope.embedding_dim
            )
        )

    def _set_planner(self, *, exact: bool, top_k: int) -> None:
        # HNSW is only ever an index scan; bitmap scans on the btree/GIN filter indexes stay allowed.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT set_config('enable_indexscan', %s, true), set_config('hnsw.ef_search', %s, true)",
                ["off" if exact else "on", str(max(self.ef_search, 2 * top_k))],
            )
