"""OpenTelemetry tracing of the request path (``tracing:`` in the configuration; off by default).

With ``tracing.exporter`` ``console`` or ``otlp``, each request is one trace: the FastAPI instrumentation's
server span (``POST /v1/completions``: the request received and answered; a ``traceparent`` the client sent makes
it a child of the client's span), and under it ``classify``, then per attempt ``route`` (the router's choice,
with a ``queue`` child while the request waits for a slot) and ``attempt`` (the backend request up to its first
token, or its whole answer), and for a stream ``stream`` (first token to the end). Attributes: ``semsched.tier``,
``semsched.tenant``, ``semsched.backend``, ``semsched.attempt``, ``semsched.outcome`` (and ``semsched.tokens`` on
the stream). The ``attempt`` span's context is sent to the backend as ``traceparent`` (W3C trace context), so a
vLLM started with ``--otlp-traces-endpoint`` adds its spans to the same trace.

Off (``exporter: none``), the gateway holds no :class:`Tracing` and each step costs one ``is None`` test. The
gateway has its own tracer provider (not the process's global one), so two gateways in one process (tests) do
not share spans. ``/health`` and ``/metrics`` are not traced.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from semsched.gateway.config import TracingConfig

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

T = TypeVar("T")
#: routes whose requests are not traced (polled often, never interesting)
UNTRACED_URLS = "/health,/metrics"


class Tracing:
    """One gateway's tracer provider, tracer and ``traceparent`` propagator; ``exporter``: where spans go instead
    of ``config``'s exporter (a test's ``InMemorySpanExporter``; spans are then exported at once)."""

    def __init__(self, config: TracingConfig, exporter: SpanExporter | None = None) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.config = config
        self.provider = TracerProvider(resource=Resource.create({"service.name": config.service_name}),
                                       sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)))
        if exporter is not None:
            self.provider.add_span_processor(SimpleSpanProcessor(exporter))
        elif config.exporter == "console":
            self.provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        elif config.exporter == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=config.endpoint)))
        self.tracer = self.provider.get_tracer("semsched.gateway")
        self._propagator = TraceContextTextMapPropagator()

    @classmethod
    def of(cls, config: TracingConfig) -> Tracing | None:
        """The tracing ``config`` asks for; None when it is off."""
        return None if config.exporter == "none" else cls(config)

    def instrument(self, app: Any) -> None:
        """The FastAPI instrumentation's server spans on ``app`` (this provider's; ASGI send/receive spans off)."""
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

        FastAPIInstrumentor.instrument_app(app, tracer_provider=self.provider, excluded_urls=UNTRACED_URLS,
                                           exclude_spans=["receive", "send"])

    def inject(self, headers: dict[str, str]) -> None:
        """Add the current span's ``traceparent`` (and ``tracestate``) to ``headers``."""
        self._propagator.inject(headers)

    def current(self) -> Any:
        """The current span (the server span, inside a request's handler)."""
        from opentelemetry import trace

        return trace.get_current_span()

    async def span(self, name: str, work: Awaitable[T], attributes: dict[str, Any], *,
                   result: Callable[[T], dict[str, Any]] | None = None,
                   error: Callable[[BaseException], str] | None = None) -> T:
        """Await ``work`` inside a span ``name`` (the current one while it runs); ``result`` gives attributes
        from its value, ``error`` the ``semsched.outcome`` of an exception (re-raised)."""
        with self.tracer.start_as_current_span(name, attributes=attributes, record_exception=False,
                                               set_status_on_exception=False) as span:
            try:
                value = await work
            except BaseException as exc:
                span.set_attribute("semsched.outcome", error(exc) if error is not None else type(exc).__name__)
                raise
            if result is not None:
                span.set_attributes(result(value))
            return value

    def shutdown(self) -> None:
        """Export what is buffered and stop."""
        self.provider.shutdown()
