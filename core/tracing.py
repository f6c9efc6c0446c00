"""OpenTelemetry traces: each request is a server span (an incoming W3C ``traceparent`` is honoured), any
code can open a child span with :func:`span`, and log lines carry ``trace_id`` / ``span_id`` beside the
request id.

Off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (OTLP over HTTP to ``<endpoint>/v1/traces``) or
``OTEL_TRACES_EXPORTER`` is ``console`` or ``otlp`` (``none`` turns it off). Off, it costs nothing:
``TracingMiddleware`` removes itself from the chain and :func:`span` hands back one shared no-op context
manager. Spans leave the process from a background thread (a batch processor, bounded by
``OTEL_EXPORTER_OTLP_TIMEOUT_S``), never on the request path.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import MiddlewareNotUsed

if TYPE_CHECKING:
    from django.http import HttpRequest, HttpResponse
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Tracer

NO_TRACE = "-"
_NOOP = contextlib.nullcontext()
_tracer: Tracer | None = None
_provider: TracerProvider | None = None


def span(name: str, **attributes: Any) -> contextlib.AbstractContextManager[object]:
    """A child span of whatever span is current (the request's, or a caller's); a no-op when tracing is off.

    ``with span("embed", model=name): ...``. Threads see the current span only when they run in a copy
    of the caller's context (``contextvars.copy_context().run``), as the search pipeline's embedding does.
    """
    if _tracer is None:
        return _NOOP
    return _tracer.start_as_current_span(name, attributes=attributes or None)


def tracing_enabled() -> bool:
    return _tracer is not None


def exporter_from_settings() -> SpanExporter | None:
    """The exporter the settings ask for, or None: tracing stays off."""
    choice, endpoint = settings.OTEL_TRACES_EXPORTER, settings.OTEL_EXPORTER_OTLP_ENDPOINT  # validated by settings
    if choice == "none" or not (choice or endpoint):
        return None
    if choice == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(
        endpoint=f"{(endpoint or 'http://localhost:4318').rstrip('/')}/v1/traces",
        timeout=settings.OTEL_EXPORTER_OTLP_TIMEOUT_S,
    )


def configure_tracing(exporter: SpanExporter | None = None, *, batch: bool = True) -> None:
    """Start tracing into ``exporter`` (default: the settings' choice; none: stay off). Called once per
    process by ``CoreConfig.ready``; tests pass an in-memory exporter with ``batch=False``."""
    global _tracer, _provider
    exporter = exporter or exporter_from_settings()
    if exporter is None:
        return
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    shutdown_tracing()
    provider = TracerProvider(resource=Resource.create({"service.name": settings.OTEL_SERVICE_NAME}))
    provider.add_span_processor(BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter))
    _provider, _tracer = provider, provider.get_tracer("retrieval-service")
    # Celery tasks: a span for sending one (its trace context travels in the message headers) and one
    # for running it in the worker, child of the sender's; the stages inside are spans of their own.
    CeleryInstrumentor().instrument(tracer_provider=provider)


def shutdown_tracing() -> None:
    """Flush and stop: tracing is off afterwards."""
    global _tracer, _provider
    if _provider is not None:
        from opentelemetry.instrumentation.celery import CeleryInstrumentor

        CeleryInstrumentor().uninstrument()
        _provider.shutdown()
    _provider = _tracer = None


def flush_tracing() -> None:
    if _provider is not None:
        _provider.force_flush()


class TracingMiddleware:
    """One server span per request, named ``<METHOD> <route>``, child of the caller's ``traceparent``."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        if _tracer is None:
            raise MiddlewareNotUsed("tracing is off")
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if _tracer is None:  # shut down since this chain was built
            return self.get_response(request)
        from opentelemetry.propagate import extract
        from opentelemetry.trace import SpanKind, Status, StatusCode

        attributes = {"http.request.method": request.method, "url.path": request.path}
        request_id = getattr(request, "request_id", None)
        if request_id:
            attributes["http.request_id"] = request_id
        with _tracer.start_as_current_span(
            request.method or "HTTP", context=extract(request.headers), kind=SpanKind.SERVER, attributes=attributes
        ) as server_span:
            response = self.get_response(request)
            match = getattr(request, "resolver_match", None)
            if match is not None and match.route:
                server_span.update_name(f"{request.method} /{match.route}")
                server_span.set_attribute("http.route", f"/{match.route}")
            server_span.set_attribute("http.response.status_code", response.status_code)
            if response.status_code >= 500:
                server_span.set_status(Status(StatusCode.ERROR))
        return response


class TraceContextFilter(logging.Filter):
    """Adds ``trace_id`` and ``span_id`` (hex; ``-`` outside a span) to every record; never drops one.
    Installed on the log handler by the settings only when tracing is on."""

    def filter(self, record: logging.LogRecord) -> bool:
        from opentelemetry.trace import get_current_span

        context = get_current_span().get_span_context()
        if context.is_valid:
            record.trace_id, record.span_id = format(context.trace_id, "032x"), format(context.span_id, "016x")
        else:
            record.trace_id = record.span_id = NO_TRACE
        return True
