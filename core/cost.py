"""Cost accounting: what each request and each ingestion consumed, priced, and charged to its tenant.

The engines report units into the open meter (``engines.metering``): embedding tokens and calls,
reranker pairs and calls, the chat model's tokens in and out and its calls (query expansion, graph
triples, community summaries); the meter adds the CPU time. :class:`CostMiddleware` opens one around
every request and, once it is answered, charges the API key's tenant; :func:`charged_to` does the same
around an ingestion, a version build or a community rebuild, for the tenant it works for. A charge goes
to the tenant's daily sums (``core.usage``, batched to Redis like the query counters) and to the
Prometheus counters ``retrieval_cost_units_total`` and ``retrieval_cost_amount_total`` by kind.

Amounts are units times the ``COST_PRICE_*`` settings (all 0 by default). A day's sums keep units, and
are priced when read: with the prices in force then.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse

from core.logging import tenant_of
from core.metrics import record_cost
from core.usage import count_cost, daily_costs
from engines import metering
from engines.metering import KINDS, Meter

COST_DAYS = 30  # the days GET /api/v1/stats sums


def price_setting(kind: str) -> str:
    """The setting that prices one unit of ``kind`` (``llm_triples_tokens_in`` -> ``COST_PRICE_LLM_TOKEN_IN``)."""
    if kind.startswith("llm_"):
        return "COST_PRICE_LLM_" + {"in": "TOKEN_IN", "out": "TOKEN_OUT", "calls": "CALL"}[kind.rsplit("_", 1)[1]]
    if kind == "cpu_ms":
        return "COST_PRICE_CPU_MS"
    return "COST_PRICE_" + kind.upper().removesuffix("S")  # embedding_tokens -> ..._EMBEDDING_TOKEN


@functools.cache
def prices() -> dict[str, float]:
    """Each kind's price, read once per process (and again when a setting changes: tests)."""
    return {kind: float(getattr(settings, price_setting(kind))) for kind in KINDS}


@receiver(setting_changed)
def _forget_prices(**kwargs: object) -> None:
    prices.cache_clear()


def priced(units: dict[str, float]) -> dict[str, Any]:
    """The ``cost`` object: every kind's units, their amounts and the total, in ``COST_CURRENCY``."""
    shown = {kind: _shown(kind, units.get(kind, 0)) for kind in KINDS}
    amounts = {kind: round(shown[kind] * price, 9) for kind, price in prices().items() if price and shown[kind]}
    return {
        "units": shown,
        "amount": round(sum(amounts.values(), 0.0), 9),  # a float also when nothing is priced (the schema's type)
        "amounts": amounts,
        "currency": settings.COST_CURRENCY,
    }


def request_cost() -> dict[str, Any]:
    """The open meter's cost so far (a search answer's ``cost``: read on the request thread, its CPU
    time up to now); zero without a meter."""
    meter = metering.current()
    return priced(meter.units() if meter is not None else {})


def charge(tenant_id: int | None, units: dict[str, float]) -> None:
    """Count ``units`` in Prometheus and, for a tenant, in its day's sums."""
    if not any(units.values()):
        return
    unit_prices = prices()
    record_cost({kind: (amount, amount * unit_prices[kind]) for kind, amount in units.items() if amount})
    if tenant_id is not None:
        count_cost(tenant_id, units)


@contextmanager
def charged_to(tenant_id: int) -> Iterator[Meter]:
    """Meter the block and charge it to ``tenant_id`` (ingestion, version builds, communities). Inside
    a meter of the same tenant, the block is that meter's; inside another (a request of no tenant, an
    eager task in a request) it is charged on its own and its CPU time taken out of the outer one."""
    outer = metering.current()
    if outer is not None and outer.tenant_id == tenant_id:
        yield outer
        return
    meter = Meter(tenant_id)
    started = time.thread_time()
    try:
        with metering.metered(meter):
            yield meter
    finally:
        if outer is not None:
            outer.exclude_cpu(time.thread_time() - started)
        charge(tenant_id, meter.units())


class CostMiddleware:
    """A meter around each request, charged to the API key's tenant once the view answered (requests
    with no tenant, the console's own, are only counted in Prometheus)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        meter = Meter()
        with metering.metered(meter):
            response = self.get_response(request)
        tenant = tenant_of(request)
        charge(tenant.pk if tenant is not None else None, meter.units())
        return response


def tenant_costs(tenant_id: int, *, days: int = COST_DAYS, now: float | None = None) -> dict[str, Any] | None:
    """The tenant's last ``days`` days: ``daily`` (those with any use, oldest first, each a date and its
    ``cost`` object) and ``total`` (their sum), priced at the current prices; None while Redis is
    unreachable."""
    rows = daily_costs(tenant_id, days=days, now=now)
    if rows is None:
        return None
    total = dict.fromkeys(KINDS, 0.0)
    for _, units in rows:
        for kind, amount in units.items():
            if kind in total:
                total[kind] += amount
    return {
        "days": days,
        "daily": [{"date": date, **priced(units)} for date, units in rows if any(units.values())],
        "total": priced(total),
    }


def _shown(kind: str, amount: float) -> float:
    """Counts as integers, CPU milliseconds to the microsecond."""
    if kind == "cpu_ms":
        return round(amount, 3)
    return amount if type(amount) is int else int(round(amount))
