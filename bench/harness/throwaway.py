"""The throwaway tenant a benchmark measures in: on a rate tier of its own with no practical limit, and
removed afterwards with its keyword indexes, whatever happened."""

from __future__ import annotations

import os
import sys
import time

from bench.harness.results import unique_name


def unlimited_rate_tier(tenant):
    """Put the bench tenant on its own rate tier with a huge limit (the free tier allows 100 requests a
    minute, the benchmarks send far more)."""
    from tenants.models import RateTier

    tier = RateTier.objects.create(name=unique_name("bench"), requests_per_window=10**9, endpoint_limits={})
    tenant.rate_tier = tier
    tenant.save(update_fields=["rate_tier"])
    return tier


def clean_up(result: dict, tenant, tier, *, tenant_prefix: str, then=None) -> dict:
    """Drop the lexical indexes of the bench tenant's KB versions, delete the tenant (cascade) and its
    tier, then run ``then`` (returns more to report, e.g. an index restored). Never raises: a failure
    is reported in the result and on stderr. Also records the load at the end."""
    from engines import get_lexical_index
    from knowledge.models import KnowledgeBaseVersion

    cleanup: dict = {}
    try:
        if tenant is not None:
            versions = KnowledgeBaseVersion.objects.filter(knowledge_base__tenant=tenant).values_list("pk", flat=True)
            for version_id in versions:
                try:
                    get_lexical_index().drop_version(version_id)
                except Exception as exc:  # the tenant is deleted anyway
                    cleanup["lexical_drop_error"] = repr(exc)
            started = time.perf_counter()
            tenant.delete()
            cleanup["tenant_delete_s"] = round(time.perf_counter() - started, 1)
        if tier is not None:
            tier.delete()
        if then is not None:
            cleanup.update(then())
    except Exception as exc:  # cleanup reports and goes on
        cleanup["error"] = repr(exc)
        print(f"CLEANUP FAILED: {exc!r}; delete tenants named {tenant_prefix}-* by hand", file=sys.stderr)
    result["cleanup"] = cleanup
    result["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return cleanup
