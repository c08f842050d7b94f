"""One request's way through the gateway: identify, validate, classify, admit, dispatch, forward, account.

:class:`Gateway` owns the parts (backend pool, dispatcher, admission, classifier, metrics, one shared
``aiohttp.ClientSession`` to the backends); :meth:`Gateway.handle` serves ``/v1/completions`` and
``/v1/chat/completions``:

1. tier and tenant from the API key or headers; the body checked (400 naming the field);
2. the prompt classified (token count, urgency, output-length distribution), batched, never waited for past
   ``classifier.timeout_ms``;
3. admission: a shed tier gets 429 with Retry-After, and so does a tenant over its quota (:mod:`.quotas`);
   a tier over its in-flight cap over every replica waits for a slot (:mod:`.fleet`);
4. a backend from the router, or a wait in the gateway's priority queue (429 queue full, 503 queue timeout or no
   healthy backend);
5. forwarded with the request's ``priority`` (where the backend takes it) and ``vllm_xargs`` (tier, SLOs,
   urgency, predicted lengths) for ``semsched.vllm.Scheduler``. An attempt that fails before the first token
   (connection refused or reset, a 502/503/504, or its backend leaving the pool) is moved to another backend,
   up to ``routing.max_attempts``; the client sees nothing of it. A stream is answered only once its first token
   is in hand, so a refusal is always an HTTP status, never a broken stream. A stream that breaks after its first
   token ends with an explicit ``error`` event, then ``[DONE]``; a request past ``admission.request_timeout_s``
   gets 504 (or an error event);
6. accounting, whatever happened: TTFT, TPOT, E2E and SLO outcomes per tier, the guard fed, the router told, the
   slot freed, the length predictor's history fed. A client that disconnects aborts its backend request (the
   connection to the backend is closed, which vLLM takes as an abort).

Times are ``time.monotonic()`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response, StreamingResponse

from semsched.core.request import InvalidRequestError, Request
from semsched.core.tiers import TierSpec, tier_index
from semsched.gateway.admission import Admission
from semsched.gateway.api import (
    ChatBody,
    CompletionBody,
    EdgeError,
    error_body,
    error_response,
    given_budget,
    identify,
    non_finite,
    output_budget,
    prompt_text,
    sequences,
)
from semsched.gateway.backends import Backend, BackendPool
from semsched.gateway.classify import Classifier, clip
from semsched.gateway.config import GatewayConfig, config_version
from semsched.gateway.dispatch import Dispatcher, DispatchRefused
from semsched.gateway.fleet import Fleet
from semsched.gateway.metrics import GatewayMetrics
from semsched.gateway.outliers import OutlierEjector
from semsched.gateway.prefix import request_prefix_hashes
from semsched.gateway.quotas import Quotas
from semsched.gateway.reload import RELOAD_OUTCOMES, ConfigState, retire
from semsched.gateway.shared import make_shared_state
from semsched.gateway.tracing import Tracing
from semsched.vllm.xargs import parse_request_options

log = logging.getLogger("semsched.gateway")
#: one INFO line per request, however it ended (``semsched gateway`` turns uvicorn's own access log off)
access_log = logging.getLogger("semsched.gateway.access")
#: the longest ``x-request-id`` a client may send (printable ASCII)
MAX_REQUEST_ID = 128

#: backend answers after which an attempt is moved to another backend (the request has not started; a 500
#: is what vLLM answers for requests it drops while it shuts down or when its engine died)
RETRY_STATUSES = frozenset({500, 502, 503, 504})
#: errors of an attempt that mean the backend is unreachable or went away
CONNECTION_ERRORS = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)
DONE_LINE = "data: [DONE]"
DONE_BYTES = b"data: [DONE]\n\n"


class _Moved(Exception):
    """The attempt's backend left the pool before the request's first token."""


@dataclass
class Call:
    """One request in the gateway: its core :class:`Request` (what routers and the guard see) and its record."""

    request: Request
    tier: str
    text: str
    body: dict[str, Any]
    stream: bool
    client_wants_usage: bool
    deadline: float
    backend: Backend | None = None
    first_token_s: float | None = None
    output_tokens: int = 0
    outcome: str = "error"
    finished: bool = False
    usage_tokens: int | None = None
    moved: bool = False  # its backend left the pool before its first token
    attempt: asyncio.Future[Any] | None = None
    alone_mark: int | None = None  # its backend's dispatch count while it was alone there (see _alone)
    client_id: str = ""  # x-request-id: the client's, or one made up; sent to the backend and back
    path: str = ""
    status: int = 500  # the HTTP status the client got (for the access log); 500 until answered
    weight: int = 1  # sequences it asks for (n, best_of): what it counts for against max_inflight and the queue
    sent_s: float | None = None  # when its current attempt was dispatched (the backend's TTFT counts from here)
    span: Any = None  # its server span, when tracing is on


class Gateway:
    """The gateway's state and request path (:func:`semsched.gateway.app.create_app` serves it)."""

    def __init__(self, config: GatewayConfig, *, now: Callable[[], float] = time.monotonic,
                 config_path: str | Path | None = None, tracing: Tracing | None = None) -> None:
        self.config = config  # swapped whole by a reload (semsched.gateway.reload): read it per use, never keep it
        self.config_path = config_path  # what a reload re-reads
        self.overrides: dict[str, Any] = {}  # settings the command line gave (--host, --port): kept by a reload
        self.config_state = ConfigState(None if config_path is None else str(config_path), config_version(config))
        self.config_models = list(config.models)
        self.started = False
        self.background: set[asyncio.Future[Any]] = set()
        self.tracing = tracing if tracing is not None else Tracing.of(config.tracing)
        self.now = now
        self.tiers: tuple[TierSpec, ...] = config.tiers()
        self._tiers = {name.lower(): spec for name, spec in tier_index(self.tiers).items()}
        self.metrics = GatewayMetrics()
        self.pool = BackendPool(config.backends, config.routing, on_change=self._backend_changed)
        self.dispatcher = Dispatcher(self.pool, config.routing, config.admission, self.metrics, now)
        self.admission = Admission(config.admission, self.tiers, now)
        self.classifier = Classifier(config.classifier, self.metrics)
        # shared with the other replicas (Redis), else this replica's own; limits read from self.config at use
        self.shared = make_shared_state(config.shared_state)
        self.fleet = Fleet(self.shared, lambda: self.config, self.pool, self.dispatcher, self.admission,
                           self.metrics, now)
        self.quotas = Quotas(self.shared, lambda: self.config)
        self.fleet.on_sync.append(self.quotas.flush)
        self._ids = itertools.count()
        self._unstarted: dict[int, dict[str, Call]] = {b.index: {} for b in self.pool.backends}
        self._session: aiohttp.ClientSession | None = None
        self._ticker: asyncio.Task[None] | None = None
        self.models: list[str] = list(config.models)
        self.metrics.initialise([t.name for t in self.tiers], [b.name for b in self.pool.backends],
                                self.dispatcher.router_name)
        self.dispatcher.on_drained = lambda backend: retire(self, backend)
        self.dispatcher.tracer = self.tracing.tracer if self.tracing is not None else None
        self.outliers = OutlierEjector(self)
        for outcome in RELOAD_OUTCOMES:
            self.metrics.child(self.metrics.reloads, outcome)
        for backend in self.pool.backends:
            self.metrics.child(self.metrics.backend_healthy, backend.name).set(1)

    # ---- lifecycle -------------------------------------------------------------------------------------------
    async def start(self) -> None:
        # aiohttp forwards: here it costs a quarter of httpx's CPU per request (benchmarks/gateway_overhead.py)
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.config.routing.connect_timeout_s)
        self._session = aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False)
        await self.classifier.start()
        await self.pool.start()
        await self.fleet.start()
        self._ticker = asyncio.create_task(self._tick())
        self.started = True
        for backend in self.pool.backends:
            self.metrics.child(self.metrics.backend_healthy, backend.name).set(int(backend.healthy))
        if not self.models:
            self.models = await self._backend_models()

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        await self.fleet.stop()
        await self.pool.stop()
        await self.classifier.stop()
        await self.outliers.stop()
        for task in list(self.background):
            task.cancel()
        if self._session is not None:
            await self._session.close()
        if self.tracing is not None:
            self.tracing.shutdown()

    async def _tick(self) -> None:
        """The shed level re-judged without arrivals, so that it decays while the gateway is idle."""
        interval_s = max(self.admission.guard.config.evaluate_every_s, 0.1)
        while True:
            await asyncio.sleep(interval_s)
            self.admission.tick(self.now())
            self.metrics.shed_level.set(self.admission.shed_level)

    async def _backend_models(self) -> list[str]:
        assert self._session is not None
        timeout = aiohttp.ClientTimeout(total=self.config.routing.health_timeout_s)
        for backend in self.pool.healthy():
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError):
                async with self._session.get(f"{backend.url}/v1/models", headers=_auth(backend),
                                             timeout=timeout) as response:
                    if response.status == 200:
                        return [str(m["id"]) for m in (await response.json())["data"]]
        return []

    def _backend_changed(self, backend: Backend, healthy: bool) -> None:
        if not backend.draining:  # (a drained one's name may be its replacement's)
            self.metrics.child(self.metrics.backend_healthy, backend.name).set(int(healthy))
        if not healthy:
            for call in list(self._unstarted[backend.index].values()):
                call.moved = True
                if call.attempt is not None:
                    call.attempt.cancel()
        self.dispatcher.pump()

    # ---- the request path ------------------------------------------------------------------------------------
    async def handle(self, http_request: HttpRequest, body: CompletionBody | ChatBody | None) -> Response:
        """Serve one ``completions`` or ``chat`` request whose body FastAPI parsed and checked (None: no body).
        The answer carries the request's ``x-request-id`` (the client's, else a new one)."""
        sent_id = http_request.headers.get("x-request-id")
        request_id = request_id_for(sent_id)
        response = await self._handle(http_request, body, request_id, sent_id)
        response.headers["x-request-id"] = request_id
        return response

    async def _handle(self, http_request: HttpRequest, body: CompletionBody | ChatBody | None, request_id: str,
                      sent_id: str | None) -> Response:
        tier = self.config.default_tier
        arrival_s = self.now()  # latencies and the request's deadline count from here, classification included
        path = http_request.url.path
        try:
            if sent_id is not None and sent_id != request_id:
                raise EdgeError(400, f"x-request-id: at most {MAX_REQUEST_ID} printable ASCII characters "
                                     f"(got {len(sent_id)} characters)", param="x-request-id")
            identity = identify(self.config, {k.lower(): v for k, v in http_request.headers.items()})
            tier = identity.tier
            if body is None:
                raise EdgeError(400, "body: a JSON object is required", param="body")
            call = await self._prepare(body, identity.tier, identity.tenant, arrival_s)
        except EdgeError as error:
            self._refused(self.tier_label(tier), error.reason)
            log_access(path, error.status, self.tier_label(tier), f"refused ({error.reason})", request_id)
            return error.response()
        call.client_id, call.path = request_id, path
        if self.tracing is not None:
            call.span = self.tracing.current()
        reason = self.admission.admit(call.request, self.now(), streamed=call.stream)
        self.metrics.shed_level.set(self.admission.shed_level)
        if reason is not None:
            kind = "shed" if reason.startswith("shed") else "queue_full"
            self._refused(call.tier, kind)
            call.outcome = "rejected"
            self._judge_slos(call, None, None, None)
            log_access(path, 429, call.tier, f"rejected ({kind})", request_id)
            return EdgeError(429, reason, reason="shed", retry_after_s=self.config.admission.retry_after_s
                             ).response()
        over_quota = await self.quotas.admit(call.request.request_id, call, http_request.headers, call.tier,
                                             call.request.prompt_tokens)
        if over_quota is not None:
            self.admission.finished(call.request, 0, self.now())  # admitted by the guard, never served
            self._refused(call.tier, "quota")
            call.outcome = "rejected"
            self._judge_slos(call, None, None, None)
            log_access(path, 429, call.tier, "rejected (quota)", request_id)
            return over_quota.response()
        return await self._serve(call, http_request)

    async def _prepare(self, body: CompletionBody | ChatBody, tier_name: str, tenant: str | None,
                       arrival_s: float) -> Call:
        tier = self._tiers.get(tier_name.lower())
        if tier is None:
            raise EdgeError(400, f"x-semsched-tier: unknown tier {tier_name!r}; known: "
                                 f"{', '.join(t.name for t in self.tiers)}", param="x-semsched-tier")
        raw = body.model_dump(exclude_unset=True)  # the fields as sent, unknown ones included
        found = non_finite(raw)
        if found is not None:  # Python's JSON parser reads 1e400 as infinity (and NaN); JSON has neither
            raise EdgeError(400, f"{found[0]}: must be a finite number (got {found[1]})", param=found[0])
        weight = sequences(body)
        if weight > self.config.admission.max_n:
            field = "n" if (body.n or 1) >= (body.best_of or 1) else "best_of"
            raise EdgeError(400, f"{field}: at most {self.config.admission.max_n} sequences per request "
                                 f"(admission.max_n; got {weight})", param=field)
        xargs = dict(body.vllm_xargs or {})
        if "tier" in xargs and str(xargs["tier"]).lower() != tier.name.lower():
            raise EdgeError(403, f"vllm_xargs.tier: the request's tier is {tier.name} (from its key or headers); "
                                 f"it cannot name another ({xargs['tier']!r})", param="vllm_xargs.tier",
                            reason="unauthorized")
        xargs["tier"] = tier.name
        try:
            options = parse_request_options(body.priority, xargs, self.tiers)
        except InvalidRequestError as error:
            message = str(error)
            raise EdgeError(400, message, param=message.split(":", 1)[0]) from None
        if body.priority is not None and body.priority < tier.priority:
            raise EdgeError(403, f"priority: at least {tier.priority} for tier {tier.name} (got {body.priority}); "
                                 "a request may lower its importance, not raise it", param="priority",
                            reason="unauthorized")
        text, counted = prompt_text(body)
        priority = max(tier.priority, options.priority)
        classified = self.classifier.classify(text, counted, priority=priority)
        prediction = await (classified if self.tracing is None else self.tracing.span(
            "classify", classified, {"semsched.tier": tier.name, "semsched.tenant": tenant or ""}))
        budget = output_budget(body, self.config.admission.max_tokens_default)
        predicted = options.predicted_output or prediction.predicted_output
        if predicted is not None and given_budget(body) is not None:
            predicted = clip(predicted, budget)  # no output is longer than max_tokens
        request = Request(
            request_id=f"gw-{next(self._ids)}", prompt_tokens=prediction.prompt_tokens, max_output_tokens=budget,
            arrival_time_s=arrival_s, prompt_text=text or None, priority=priority,
            tier=tier.name, ttft_slo_s=options.ttft_slo_s, tpot_slo_s=options.tpot_slo_s,
            e2e_slo_s=options.e2e_slo_s,
            urgency=options.urgency if options.urgency is not None else prediction.urgency,
            predicted_output=predicted, client=tenant,
            prefix_hashes=request_prefix_hashes(body, text))  # (for prefix-affinity)
        stream_options = raw.get("stream_options")
        wants_usage = isinstance(stream_options, dict) and bool(stream_options.get("include_usage"))
        forwarded = dict(raw)
        forwarded["vllm_xargs"] = self._xargs(request, xargs)
        if body.stream:
            forwarded["stream_options"] = {**(stream_options if isinstance(stream_options, dict) else {}),
                                           "include_usage": True}
        return Call(request, tier.name, text, forwarded, body.stream, wants_usage,
                    deadline=request.arrival_time_s + self.config.admission.request_timeout_s, weight=weight)

    @staticmethod
    def _xargs(request: Request, given: dict[str, Any]) -> dict[str, Any]:
        xargs = dict(given)
        xargs["tier"] = request.tier
        for key, value_s in (("ttft_slo_ms", request.ttft_slo_s), ("tpot_slo_ms", request.tpot_slo_s),
                             ("e2e_slo_ms", request.e2e_slo_s)):
            if value_s is not None:
                xargs[key] = round(value_s * 1000, 6)
        if request.urgency is not None:
            xargs["urgency"] = request.urgency
        predicted = request.predicted_output
        if predicted is not None and "predicted_output_tokens" not in xargs:
            xargs["predicted_lengths"] = list(predicted.lengths)
            xargs["predicted_probs"] = list(predicted.probs)
        return xargs

    def tier_label(self, name: str) -> str:
        """``name`` as a metric label: the table's spelling, or ``unknown`` (labels stay few)."""
        tier = self._tiers.get(name.lower())
        return tier.name if tier is not None else "unknown"

    def _refused(self, tier: str, reason: str) -> None:
        self.metrics.child(self.metrics.rejections, tier, reason).inc()
        self.metrics.child(self.metrics.requests, tier, "rejected").inc()

    # ---- dispatch and forwarding -----------------------------------------------------------------------------
    async def _serve(self, call: Call, http_request: HttpRequest) -> Response:
        streaming_handed_over = False
        try:
            response = await self._until_disconnect(call, http_request)
            if response is None:
                call.outcome, call.status = "cancelled", 499
                return Response(status_code=499)
            if isinstance(response, StreamingResponse):
                streaming_handed_over = True
            return response
        except DispatchRefused as refused:
            call.outcome, call.status = "rejected", refused.status
            self.metrics.child(self.metrics.rejections, call.tier, refused.reason).inc()
            return EdgeError(refused.status, refused.message, reason=refused.reason,
                             retry_after_s=self.config.admission.retry_after_s).response()
        except TimeoutError:
            call.outcome, call.status = "timeout", 504
            return EdgeError(504, f"no answer within admission.request_timeout_s "
                                  f"({self.config.admission.request_timeout_s:g} s)").response()
        finally:
            if not streaming_handed_over:
                self._finish(call)

    async def _until_disconnect(self, call: Call, http_request: HttpRequest) -> Response | None:
        """The request's answer, or None (its work cancelled) if the client goes away first."""
        task = asyncio.ensure_future(self._attempts(call))
        watcher = asyncio.ensure_future(_disconnected(http_request))
        try:
            done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                return task.result()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            answer = task.result() if task.done() and not task.cancelled() and task.exception() is None else None
            if isinstance(answer, _Relay):
                await answer.close()  # answered as the client left: nobody will read the stream
            return None
        finally:
            watcher.cancel()
            if not task.done():
                task.cancel()

    async def _attempts(self, call: Call) -> Response:
        tried: set[int] = set()
        last_error = "no attempt made"
        async with asyncio.timeout(max(call.deadline - self.now(), 0.001)):
            await self.fleet.take_tier(call.request, call.tier, call.weight)
        for attempt in range(self.config.routing.max_attempts):
            remaining = call.deadline - self.now()
            if remaining <= 0:
                raise TimeoutError
            async with asyncio.timeout(remaining):
                acquired = self._acquire(call, tried)
                backend = await (acquired if self.tracing is None else self.tracing.span(
                    "route", acquired, {"semsched.tier": call.tier, "semsched.attempt": attempt + 1},
                    result=lambda chosen: {"semsched.backend": chosen.name},
                    error=lambda exc: getattr(exc, "reason", type(exc).__name__)))
            call.backend = backend
            call.sent_s = self.now()
            call.alone_mark = backend.dispatched if len(backend.inflight) == 1 else None
            self._unstarted[backend.index][call.request.request_id] = call
            call.moved = False
            try:
                async with asyncio.timeout(max(call.deadline - self.now(), 0.001)):
                    return await self._forward(call, backend)
            except (_Moved, *CONNECTION_ERRORS) as error:
                cause = "left_pool" if isinstance(error, _Moved) else type(error).__name__
                last_error = f"{backend.name}: {cause}"
                if not isinstance(error, _Moved):
                    self.pool.report_failure(backend, f"{type(error).__name__}: {error}")
            except _RetryStatus as retry:
                cause = f"http_{retry.status}"
                last_error = f"{backend.name} answered {retry.status}"
            self._unstarted[backend.index].pop(call.request.request_id, None)
            tried.add(backend.index)
            self.metrics.child(self.metrics.rerouted, backend.name, cause).inc()
            call.backend = None
            self.fleet.release(call.request, backend)
            self.dispatcher.finished(backend, call.request)  # off that backend's books (cost-aware routers)
            self.dispatcher.release(backend, call.request)
            log.info("request %s moved off %s (%s), attempt %d", call.request.request_id, backend.name, cause,
                     attempt + 1)
            if tried >= {b.index for b in self.pool.active()}:
                tried.clear()  # every backend failed once: any may be tried again (drained ones aside)
        raise DispatchRefused(503, "no_backend", f"no backend could serve the request in "
                                                 f"{self.config.routing.max_attempts} attempts ({last_error})")

    async def _acquire(self, call: Call, tried: set[int]) -> Backend:
        """A backend slot for ``call`` from the dispatcher, under the backend's cap over every replica (a backend
        another replica filled meanwhile counts as full until the next sync: the dispatcher is asked again)."""
        while True:
            backend = await self.dispatcher.acquire(call.request, call.tier, frozenset(tried), weight=call.weight)
            try:
                if await self.fleet.take_backend(backend, call.request, call.weight):
                    return backend
            except BaseException:
                self.fleet.release(call.request, backend)
                self.dispatcher.finished(backend, call.request)
                self.dispatcher.release(backend, call.request)
                raise
            self.dispatcher.finished(backend, call.request)
            self.dispatcher.release(backend, call.request)

    def _body_for(self, call: Call, backend: Backend) -> dict[str, Any]:
        body = dict(call.body)
        if backend.config.send_priority:
            body["priority"] = call.request.priority
        else:
            body.pop("priority", None)
        return body

    async def _forward(self, call: Call, backend: Backend) -> Response:
        """One attempt at ``backend``. Everything up to the first token runs as one task, which
        :meth:`_backend_changed` cancels if the backend leaves the pool meanwhile (then :class:`_Moved`)."""
        work = self._until_first_token(call, backend)
        attempt = asyncio.ensure_future(work if self.tracing is None else self.tracing.span(
            "attempt", work, {"semsched.tier": call.tier, "semsched.backend": backend.name},
            result=lambda value: {"semsched.outcome": call.outcome if isinstance(value, Response) else "started"},
            error=lambda exc: _attempt_error(call, exc)))
        call.attempt = attempt
        try:
            result = await attempt
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if call.moved and current is not None and not current.cancelling():
                raise _Moved() from None
            raise
        finally:
            call.attempt = None
        if isinstance(result, Response):
            return result
        upstream, head = result
        self._started(call, backend)
        call.outcome, call.status = "streaming", 200
        for line in head:
            self._count_line(call, line)
        stream_span = None if self.tracing is None else self.tracing.tracer.start_span(
            "stream", attributes={"semsched.tier": call.tier, "semsched.backend": backend.name})

        async def close() -> None:
            upstream.release()
            if call.outcome == "streaming":  # the client left before the stream's end
                call.outcome = "cancelled"
            if stream_span is not None:
                stream_span.set_attributes({"semsched.outcome": call.outcome,
                                            "semsched.tokens": call.output_tokens})
                stream_span.end()
            self._finish(call)

        return _Relay(self._relay(call, upstream, head), close)

    async def _until_first_token(self, call: Call, backend: Backend) -> Response | tuple[Any, list[str]]:
        """The backend's whole answer, or an error answer, or (for a stream) the open response and its events
        up to the first token."""
        assert self._session is not None
        path = "/v1/chat/completions" if "messages" in call.body else "/v1/completions"
        headers = {**_auth(backend), "x-request-id": call.client_id}
        if self.tracing is not None:
            self.tracing.inject(headers)  # traceparent: the attempt span
        upstream = await self._session.post(backend.url + path, json=self._body_for(call, backend),
                                            headers=headers)
        try:
            if upstream.status != 200:
                content = await upstream.read()
                if upstream.status in RETRY_STATUSES:
                    raise _RetryStatus(upstream.status)
                call.outcome, call.status = "error", upstream.status
                return Response(content, status_code=upstream.status,
                                media_type=upstream.headers.get("content-type", "application/json"))
            if not call.stream:
                content = await upstream.read()
                self._started(call, backend)
                call.output_tokens = _completion_tokens(content)
                call.outcome = "rejected" if _aborted(content) else "ok"
                call.status = 200
                return Response(content, media_type="application/json")
            media = upstream.headers.get("content-type", "").split(";", 1)[0].strip()
            if media != "text/event-stream":  # a malformed answer: this request's error, not the backend's health
                await upstream.read()
                call.outcome, call.status = "error", 502
                return error_response(502, f"{backend.name} answered a streamed request with "
                                           f"{media or 'no content-type'}, not an event stream")
            head: list[str] = []
            async for raw in upstream.content:  # buffer until the first token: until then the request may move
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                if not line:
                    continue
                head.append(line)
                if line == DONE_LINE or _is_token_event(line):
                    break
            else:
                raise aiohttp.ServerDisconnectedError("the backend closed the stream before the first token")
            refusal = _error_of(head[-1])
            if refusal is not None:  # refused before any token (e.g. semsched's scheduler shed it): a status
                status, payload = refusal
                if status in RETRY_STATUSES:
                    raise _RetryStatus(status)
                call.outcome = "rejected" if status in (429, 503) else "error"
                call.status = status
                return JSONResponse(payload, status_code=status)
        except BaseException:
            upstream.close()
            raise
        return upstream, head

    def _started(self, call: Call, backend: Backend) -> None:
        """The first token (a stream) or the whole answer is in hand. Only a stream's first token is a TTFT:
        a whole answer's first token is never seen, so it gives no TTFT and no TPOT (only E2E)."""
        self._unstarted[backend.index].pop(call.request.request_id, None)
        self.dispatcher.first_token(backend, call.request)
        if not call.stream:
            return
        now = self.now()
        call.first_token_s = now
        if call.sent_s is not None:
            self.outliers.observe(backend, now - call.sent_s)
        alone = self._alone(call, backend)
        self.admission.first_token(call.request, now, alone=alone)
        call.alone_mark = backend.dispatched if len(backend.inflight) == 1 else None  # alone from here on?

    @staticmethod
    def _alone(call: Call, backend: Backend) -> bool:
        """Whether ``call`` has been the only request of the gateway on ``backend`` since ``alone_mark`` was
        taken: alone then, alone now, and nothing dispatched there in between."""
        return call.alone_mark is not None and call.alone_mark == backend.dispatched and len(backend.inflight) == 1

    async def _relay(self, call: Call, upstream: Any, head: list[str]) -> AsyncIterator[bytes]:
        """The client's stream: the buffered head, then every event as it comes, read to the end so that the
        connection to the backend is kept for the next request; an explicit error event if the backend's stream
        breaks or the deadline passes (accounting: :class:`_Relay`'s ``close``)."""
        try:
            for line in head:
                out = self._relay_line(call, line, counted=True)
                if out:
                    yield out
            pending = b""
            idle_s = self.config.admission.stream_idle_timeout_s
            loop = asyncio.get_running_loop()
            stall = asyncio.timeout(None if idle_s is None else loop.time() + idle_s)  # re-armed at each read
            async with asyncio.timeout(max(call.deadline - self.now(), 0.001)):
                try:
                    async with stall:
                        async for chunk in upstream.content.iter_any():  # whatever arrived: events go on in bulk
                            pending += chunk
                            end = pending.rfind(b"\n\n")
                            if end >= 0:
                                block, pending = pending[:end + 2], pending[end + 2:]
                                out = self._relay_block(call, block)
                                if out:
                                    yield out
                            if idle_s is not None:
                                stall.reschedule(loop.time() + idle_s)
                except TimeoutError:
                    if stall.expired():
                        raise _Stalled() from None
                    raise
            if pending.strip():
                out = self._relay_block(call, pending)
                if out:
                    yield out
            if call.outcome == "streaming":
                raise aiohttp.ClientPayloadError("the backend's stream ended without [DONE]")
        except TimeoutError:
            call.outcome = "timeout"
            yield _error_event(504, f"no end of stream within admission.request_timeout_s "
                                    f"({self.config.admission.request_timeout_s:g} s)")
        except _Stalled:
            call.outcome = "timeout"
            backend = call.backend.name if call.backend else "backend"
            idle_s = self.config.admission.stream_idle_timeout_s or 0.0
            yield _error_event(504, f"{backend} sent nothing for {idle_s:g} s after {call.output_tokens} tokens "
                                    "(admission.stream_idle_timeout_s)")
        except (aiohttp.ClientError, OSError) as error:
            if call.outcome != "ok":
                call.outcome = "error"
                backend = call.backend.name if call.backend else "backend"
                yield _error_event(502, f"{backend} broke the stream after {call.output_tokens} tokens: "
                                        f"{type(error).__name__}: {error}")
        except asyncio.CancelledError:
            if call.outcome == "streaming":
                call.outcome = "cancelled"
            raise
        finally:
            if call.span is not None:  # the server span ends with the last body message: before _finish
                self._span_outcome(call, call.backend.name if call.backend is not None else "-")

    @staticmethod
    def _span_outcome(call: Call, backend: str) -> None:
        """The request's tier, tenant, backend and outcome on its server span, while that is open."""
        if call.span.is_recording():
            call.span.set_attributes({"semsched.tier": call.tier, "semsched.tenant": call.request.client or "",
                                      "semsched.backend": backend, "semsched.outcome": call.outcome})

    def _relay_block(self, call: Call, block: bytes) -> bytes:
        """Whole events as they came; only a block that may hold the end, the usage or an event to leave out is
        taken apart line by line."""
        if b"[DONE]" in block or b'"completion_tokens"' in block or (
                not call.client_wants_usage and b'"usage"' in block):
            lines = block.decode("utf-8", errors="replace").split("\n")
            return b"".join(self._relay_line(call, line.rstrip("\r")) for line in lines)
        if call.usage_tokens is None:
            call.output_tokens += block.count(b"data: {")
        return block

    def _count_line(self, call: Call, line: str) -> None:
        """Output tokens: the usage's count once it comes (the gateway asks for it), one per event till then.
        Only a line that may carry the usage is parsed."""
        if '"completion_tokens"' in line:
            event = _event(line)
            usage = event.get("usage") if event is not None else None
            tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
            if isinstance(tokens, int):
                call.usage_tokens = tokens
                call.output_tokens = tokens
                return
        if call.usage_tokens is None and line.startswith("data: {") and '"choices": []' not in line \
                and '"choices":[]' not in line:
            call.output_tokens += 1

    def _relay_line(self, call: Call, line: str, *, counted: bool = False) -> bytes:
        """The bytes to send the client for one line of the backend's stream. The end, ``[DONE]``, marks the
        request served before it is sent: a client may hang up as soon as it reads it."""
        if not line:
            return b""
        if line == DONE_LINE:
            call.outcome = "ok"
            return DONE_BYTES
        if not counted:
            self._count_line(call, line)
        if not call.client_wants_usage and '"usage"' in line and _usage_only(line):
            return b""
        return (line + "\n\n").encode()

    def _finish(self, call: Call) -> None:
        """Accounting once per admitted request, whatever became of it (later calls do nothing)."""
        if call.finished:
            return
        call.finished = True
        now = self.now()
        request, tier = call.request, call.tier
        ok = call.outcome == "ok"
        alone_since_s = None
        backend_name = call.backend.name if call.backend is not None else "-"
        if call.backend is not None:
            if ok and call.first_token_s is not None and self._alone(call, call.backend):
                alone_since_s = call.first_token_s
            self._unstarted[call.backend.index].pop(request.request_id, None)
            self.fleet.release(request)  # before the local slot: a released lease is sent to Redis first
            self.dispatcher.finished(call.backend, request)
            self.dispatcher.release(call.backend, request)
            call.backend = None
        self.fleet.release(request)  # its tier's slot (a request that never had a backend too); nothing leaks
        self.quotas.finished(request.request_id)
        self.admission.finished(request, call.output_tokens, now, alone_since_s=alone_since_s)
        self.metrics.child(self.metrics.requests, tier, call.outcome).inc()
        ttft = None if call.first_token_s is None else call.first_token_s - request.arrival_time_s
        e2e = now - request.arrival_time_s if ok else None
        tpot = None
        if ok and call.first_token_s is not None and call.output_tokens >= 2:
            tpot = (now - call.first_token_s) / (call.output_tokens - 1)
        if ttft is not None:
            self.metrics.child(self.metrics.ttft, tier).observe(ttft)
        if tpot is not None:
            self.metrics.child(self.metrics.tpot, tier).observe(tpot)
        if e2e is not None:
            self.metrics.child(self.metrics.e2e, tier).observe(e2e)
        self._judge_slos(call, ttft, tpot, e2e)
        log_access(call.path, call.status, tier, call.outcome, call.client_id, backend=backend_name,
                    tokens=call.output_tokens, ttft_s=ttft, e2e_s=now - request.arrival_time_s)
        if call.span is not None:
            self._span_outcome(call, backend_name)
        if ok and call.text:
            self.classifier.observe(call.text, request.prompt_tokens, call.output_tokens)
        self.metrics.shed_level.set(self.admission.shed_level)

    def _judge_slos(self, call: Call, ttft_s: float | None, tpot_s: float | None, e2e_s: float | None) -> None:
        """SLO outcomes, one rule for every request whose body passed the checks: one that was not served (shed,
        queue full, queue timeout, no backend, an error, a timeout, a disconnect) misses each target it has; a
        served one is judged on what the gateway saw (a whole answer: E2E only; one token: no TPOT)."""
        ok = call.outcome == "ok"
        request = call.request
        judged = (("ttft", ttft_s, request.ttft_slo_s), ("tpot", tpot_s, request.tpot_slo_s),
                  ("e2e", e2e_s, request.e2e_slo_s))
        for metric, observed, target in judged:
            if target is None or (ok and observed is None):
                continue
            met = ok and observed is not None and observed <= target
            self.metrics.child(self.metrics.slo, call.tier, metric, "met" if met else "missed").inc()

    # ---- other routes ----------------------------------------------------------------------------------------
    def health(self) -> JSONResponse:
        """200 while any backend is in the pool, else 503; each backend's state (an ejected one: until when),
        those draining after a reload, and the configuration in force (its version, what waits for a restart)."""
        backends = {b.name: {"healthy": b.healthy, "inflight": len(b.inflight), "error": b.last_error,
                             **self._ejection(b)} for b in self.pool.active()}
        draining = [{"name": b.name, "url": b.url, "inflight": len(b.inflight)} for b in self.pool.backends
                    if b.draining and not b.retired]
        healthy = any(b.in_pool for b in self.pool.backends)
        return JSONResponse({"status": "ok" if healthy else "unavailable", "backends": backends,
                             "draining": draining, "config": self.config_state.as_dict(),
                             "shared_state": self.fleet.status()},
                            status_code=200 if healthy else 503)

    def _ejection(self, backend: Backend) -> dict[str, Any]:
        if backend.ejected_until is None:
            return {}
        left_s = max(backend.ejected_until - self.now(), 0.0)
        until = datetime.fromtimestamp(time.time() + left_s, UTC).isoformat(timespec="seconds")
        return {"ejected_until": until, "ejected_for_s": round(left_s, 3)}

    async def model_list(self) -> JSONResponse:
        """The configured models, else the backends' (asked again while none is known: backends that were not up
        when the gateway started)."""
        if not self.models:
            self.models = await self._backend_models()
        return JSONResponse({"object": "list", "data": [
            {"id": name, "object": "model", "owned_by": "semsched-gateway"} for name in self.models]})


class _Relay(StreamingResponse):
    """A streamed answer whose ``close`` runs however the response ends: finished, broken, or never started
    because the client left first."""

    def __init__(self, content: AsyncIterator[bytes], close: Callable[[], Awaitable[None]]) -> None:
        super().__init__(content, media_type="text/event-stream")
        self.close = close

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.close()


class _Stalled(Exception):
    """A started stream's backend sent nothing for ``admission.stream_idle_timeout_s``."""


class _RetryStatus(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


async def _disconnected(http_request: HttpRequest) -> None:
    """Returns when the client hangs up (the body was read: the next ASGI message is the disconnect)."""
    while (await http_request.receive())["type"] != "http.disconnect":
        pass


def request_id_for(sent: str | None) -> str:
    """The request id of a request whose ``x-request-id`` header is ``sent``: that, unless it is missing or not
    1 to :data:`MAX_REQUEST_ID` printable ASCII characters; else a new one."""
    if sent is not None and 0 < len(sent) <= MAX_REQUEST_ID and sent.isascii() and sent.isprintable():
        return sent
    return uuid.uuid4().hex


def log_access(path: str, status: int, tier: str, outcome: str, request_id: str, *, backend: str = "-",
                tokens: int = 0, ttft_s: float | None = None, e2e_s: float | None = None) -> None:
    if access_log.isEnabledFor(logging.INFO):
        ttft = f"{ttft_s * 1000:.1f}" if ttft_s is not None else "-"
        e2e = f"{e2e_s * 1000:.1f}" if e2e_s is not None else "-"
        access_log.info("POST %s %d tier=%s outcome=%s backend=%s tokens=%d ttft_ms=%s e2e_ms=%s id=%s", path,
                        status, tier, outcome, backend, tokens, ttft, e2e, request_id)


def _auth(backend: Backend) -> dict[str, str]:
    key = backend.config.bearer
    return {"authorization": f"Bearer {key}"} if key else {}


def _attempt_error(call: Call, error: BaseException) -> str:
    """The ``semsched.outcome`` of an attempt span that ended with ``error``."""
    if isinstance(error, asyncio.CancelledError):
        return "moved" if call.moved else "cancelled"
    if isinstance(error, _RetryStatus):
        return f"http_{error.status}"
    return "connection_error" if isinstance(error, CONNECTION_ERRORS) else type(error).__name__


def _event(line: str) -> dict[str, Any] | None:
    if not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    if not payload or payload == "[DONE]":
        return None
    try:
        value = json.loads(payload)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _is_token_event(line: str) -> bool:
    event = _event(line)
    if event is None:
        return False
    if "error" in event:
        return True
    for choice in event.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        text = choice.get("text") or (delta.get("content") if isinstance(delta, dict) else None)
        if text or choice.get("finish_reason"):
            return True
    return False


def _tokens_in(line: str, so_far: int) -> int:
    """Output tokens counted after ``line``: the usage's count when it has one, else one more per token event."""
    event = _event(line)
    if event is None:
        return so_far
    usage = event.get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if isinstance(tokens, int):
        return max(so_far, tokens)
    return so_far + 1 if _is_token_event(line) and "error" not in event else so_far


def _usage_only(line: str) -> bool:
    event = _event(line)
    return event is not None and not event.get("choices") and event.get("usage") is not None


def _error_of(line: str) -> tuple[int, dict[str, Any]] | None:
    """The status and body of an SSE ``error`` event (vLLM's shape: ``{"error": {..., "code": 503}}``)."""
    event = _event(line)
    if event is None or not isinstance(event.get("error"), dict):
        return None
    code = event["error"].get("code")
    status = code if isinstance(code, int) and 400 <= code <= 599 else 502
    return status, event


def _aborted(content: bytes) -> bool:
    """A whole answer whose every choice was aborted before any text (an engine-side rejection)."""
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        choices = json.loads(content).get("choices") or []
        return bool(choices) and all(c.get("finish_reason") == "abort" and not (
            c.get("text") or (c.get("message") or {}).get("content")) for c in choices)
    return False


def _completion_tokens(content: bytes) -> int:
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        tokens = json.loads(content).get("usage", {}).get("completion_tokens")
        if isinstance(tokens, int):
            return tokens
    return 1


def _error_event(status: int, message: str) -> bytes:
    return (f"data: {json.dumps(error_body(status, message))}\n\n" + "data: [DONE]\n\n").encode()
