from django.apps import AppConfig


class CoreConfig(AppConfig):
    """The HTTP platform: errors, middleware, Redis, limits, idempotency, health. Imports no domain app."""

    name = "core"

    def ready(self) -> None:
        from core import schema  # noqa: F401  (registers the API-key OpenAPI extension)
        from core.tracing import configure_tracing

        configure_tracing()  # off unless the OTEL_* settings ask for it
