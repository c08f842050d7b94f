"""Tracing (issue 32): one request's span tree (names, parents, attributes) in the SDK's in-memory exporter,
and the ``traceparent`` the backend receives; off by default."""

from __future__ import annotations

import threading
from typing import Any

import httpx
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from semsched.gateway.app import create_app
from semsched.gateway.config import TracingConfig
from semsched.gateway.service import Gateway
from semsched.gateway.tracing import Tracing
from tests.fake_openai import fake_openai_app, running_app
from tests.gateway.conftest import config_for, wait_for

BODY = {"model": "tiny", "prompt": "hello there", "max_tokens": 3, "stream": True}


def _traced(config: Any) -> tuple[Gateway, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    return Gateway(config, tracing=Tracing(TracingConfig(), exporter=exporter)), exporter


def _by_name(spans: Any) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for span in spans:
        found.setdefault(span.name, []).append(span)
    return found


def test_one_streamed_request_is_one_trace_and_the_backend_gets_its_traceparent() -> None:
    backend = fake_openai_app()
    with running_app(backend) as url:
        config = config_for([url], api_keys={"sk-traced-key": {"tier": "PREMIUM", "tenant": "acme"}})
        gateway, exporter = _traced(config)
        with running_app(create_app(config, gateway)) as served:
            with httpx.stream("POST", f"{served}/v1/completions", json=BODY,
                              headers={"authorization": "Bearer sk-traced-key"}) as answer:
                assert answer.status_code == 200
                answer.read()
            wait_for(lambda: any(s.kind == SpanKind.SERVER for s in exporter.get_finished_spans()))
            spans = _by_name(exporter.get_finished_spans())
    (server,) = spans["POST /v1/completions"]
    assert server.parent is None and server.kind == SpanKind.SERVER
    trace_id = server.context.trace_id
    assert {s.context.trace_id for group in spans.values() for s in group} == {trace_id}
    for name in ("classify", "route", "attempt", "stream"):
        (span,) = spans[name]
        assert span.parent is not None and span.parent.span_id == server.context.span_id, name
    assert "queue" not in spans  # a slot was free: no wait
    expected = {"semsched.tier": "PREMIUM", "semsched.tenant": "acme", "semsched.backend": "b0",
                "semsched.outcome": "ok"}
    assert {k: server.attributes[k] for k in expected} == expected
    (route,), (attempt,), (stream,) = spans["route"], spans["attempt"], spans["stream"]
    assert (route.attributes["semsched.backend"], route.attributes["semsched.attempt"]) == ("b0", 1)
    assert (attempt.attributes["semsched.backend"], attempt.attributes["semsched.outcome"]) == ("b0", "started")
    assert (stream.attributes["semsched.outcome"], stream.attributes["semsched.tokens"]) == ("ok", 3)
    assert spans["classify"][0].attributes["semsched.tenant"] == "acme"
    # the backend's request carries the attempt span's context (W3C: version-traceid-spanid-flags)
    (call,) = backend.state.calls
    version, sent_trace, sent_parent, flags = call["_headers"]["traceparent"].split("-")
    assert (int(sent_trace, 16), int(sent_parent, 16)) == (trace_id, attempt.context.span_id)
    assert int(flags, 16) & 1  # sampled


def test_a_client_traceparent_is_continued_and_a_wait_is_a_queue_span() -> None:
    backend = fake_openai_app(first_token_delay_s=0.3)
    with running_app(backend) as url:
        config = config_for([url], backend={"max_inflight": 1})
        gateway, exporter = _traced(config)
        client_trace = "0af7651916cd43dd8448eb211c80319c"
        parent = f"00-{client_trace}-b7ad6b7169203331-01"
        with running_app(create_app(config, gateway)) as served:
            def send(headers: dict[str, str]) -> None:
                assert httpx.post(f"{served}/v1/completions", json={**BODY, "stream": False}, headers=headers,
                                  timeout=30).status_code == 200

            first = threading.Thread(target=send, args=({},))
            first.start()
            wait_for(lambda: backend.state.in_flight == 1)
            send({"traceparent": parent})  # waits for the first one's slot
            first.join(timeout=30)
            wait_for(lambda: sum(s.kind == SpanKind.SERVER for s in exporter.get_finished_spans()) == 2)
            spans = exporter.get_finished_spans()
    continued = [s for s in spans if s.context.trace_id == int(client_trace, 16)]
    names = _by_name(continued)
    (server,) = names["POST /v1/completions"]
    assert server.parent is not None and server.parent.span_id == int("b7ad6b7169203331", 16)
    (queue,), (route,) = names["queue"], names["route"]
    assert queue.parent is not None and queue.parent.span_id == route.context.span_id
    assert "stream" not in names  # a whole answer: the attempt covers it
    assert names["attempt"][0].attributes["semsched.outcome"] == "ok"
    other = [s for s in spans if s.context.trace_id != int(client_trace, 16)]
    assert "queue" not in _by_name(other)  # the first request did not wait
    assert backend.state.calls[1]["_headers"]["traceparent"].split("-")[1] == client_trace


def test_tracing_is_off_by_default() -> None:
    backend = fake_openai_app()
    with running_app(backend) as url:
        config = config_for([url])
        gateway = Gateway(config)
        assert gateway.tracing is None and gateway.dispatcher.tracer is None
        with running_app(create_app(config, gateway)) as served:
            assert httpx.post(f"{served}/v1/completions", json={**BODY, "stream": False}).status_code == 200
    assert "traceparent" not in backend.state.calls[0]["_headers"]


def test_console_and_otlp_exporters_are_built_from_the_config() -> None:
    for exporter in ("console", "otlp"):
        tracing = Tracing.of(TracingConfig(exporter=exporter, endpoint="http://127.0.0.1:9/v1/traces",
                                           sample_ratio=0.5))
        assert tracing is not None
        assert tracing.provider.sampler.get_description().startswith("ParentBased")
        tracing.shutdown()
    assert Tracing.of(TracingConfig()) is None
