"""Logs, metrics and traces."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import PositiveFloat

from retrieval_site.settings.base import HttpUrlOrUnset, Lowercase, Networks, Section, Uppercase


class Observability(Section):
    title = "Logs, metrics and traces"

    # json: one JSON object per line, for log shippers; text: for reading in a terminal.
    LOG_FORMAT: Annotated[Literal["json", "text"], Lowercase] = "json"
    LOG_LEVEL: Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], Uppercase] = "INFO"
    # /metrics answers these addresses or networks (the TCP peer, not X-Forwarded-For), or any
    # client sending "Authorization: Bearer <METRICS_TOKEN>" when a token is set.
    METRICS_ALLOWED_IPS: Networks = ["127.0.0.1", "::1"]
    METRICS_TOKEN: str = ""
    # OpenTelemetry traces (core.tracing): off unless an OTLP endpoint is set or OTEL_TRACES_EXPORTER is
    # console/otlp; off costs nothing (the middleware removes itself, spans are one shared no-op).
    OTEL_EXPORTER_OTLP_ENDPOINT: HttpUrlOrUnset = ""  # e.g. http://otel-collector:4318
    OTEL_TRACES_EXPORTER: Annotated[Literal["", "otlp", "console", "none"], Lowercase] = ""
    OTEL_SERVICE_NAME: str = "retrieval-service"
    OTEL_EXPORTER_OTLP_TIMEOUT_S: PositiveFloat = 10.0

    @property
    def tracing(self) -> bool:
        """Whether spans are exported: an endpoint or an exporter is set, and the exporter is not "none"."""
        exporter = self.OTEL_TRACES_EXPORTER
        return bool(self.OTEL_EXPORTER_OTLP_ENDPOINT or exporter) and exporter != "none"
