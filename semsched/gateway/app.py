"""The gateway's HTTP face: a FastAPI app around one :class:`~semsched.gateway.service.Gateway`.

Routes: ``POST /v1/completions``, ``POST /v1/chat/completions`` (streaming and not), ``GET /v1/models``,
``GET /health`` (200 while any backend is in the pool, else 503, with each backend's state), ``GET /metrics``
(Prometheus), ``POST /admin/reload`` (re-read the configuration file: :mod:`semsched.gateway.reload`; behind
the admin key, 404 while none is configured). Request bodies are declared with the pydantic models of
:mod:`semsched.gateway.api`, so the OpenAPI schema (``/openapi.json``) describes them; the handlers read the
raw body themselves (a field the gateway does not know is passed on as sent) and answer a bad one with a 400
naming the field. An exception in one request's handling is answered 500 for that request alone and logged; the
server goes on.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import Body, FastAPI
from fastapi.exceptions import RequestValidationError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response

from semsched.gateway.api import ChatBody, CompletionBody, error_response
from semsched.gateway.config import GatewayConfig
from semsched.gateway.reload import install_sighup, reload_config, remove_sighup
from semsched.gateway.service import Gateway, log_access, request_id_for

log = logging.getLogger("semsched.gateway")


class _TooLarge(Exception):
    pass


class BodyLimit:
    """Pure ASGI middleware: a body over ``limit`` bytes is refused, 413 when its ``content-length`` says so at
    once, else when the bytes read pass the limit (FastAPI then answers 400: the body could not be read)."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > self.limit:
                response = error_response(413, f"body: at most {self.limit} bytes (got {int(value)})",
                                          param="body")
                await response(scope, receive, send)
                return
        received = 0

        async def limited() -> Any:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise _TooLarge(f"body: more than {self.limit} bytes")
            return message

        await self.app(scope, limited, send)


def _body_error(content_type: str | None, first: Any) -> tuple[str, str]:
    """The message and ``param`` of a body FastAPI could not take: the field, or the body itself when it is not
    JSON (a character offset is no field)."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media and media != "application/json" and not media.endswith("+json"):  # FastAPI did not parse it
        return f"body: JSON is expected (content-type: application/json; got {media})", "body"
    if first.get("type") == "json_invalid":
        detail = (first.get("ctx") or {}).get("error")
        position = next((p for p in first["loc"] if isinstance(p, int)), None)
        where = f" at character {position}" if position is not None else ""
        return f"body: not valid JSON{where}" + (f" ({detail})" if detail else ""), "body"
    where = ".".join(str(p) for p in first["loc"] if p != "body") or "body"
    return f"{where}: {first['msg']}", where


def admin_refusal(admin_key: str | None, authorization: str | None) -> Response | None:
    """None when ``authorization`` carries the admin key (``Bearer KEY``), else the answer: 404 while no admin
    key is configured (the admin routes are off), 401 without a key, 403 with a wrong one."""
    if admin_key is None:
        return error_response(404, "the admin routes are off: set admin_key_env or admin_key_file in the "
                                   "gateway's configuration (or reload with SIGHUP)")
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return error_response(401, "authorization: the admin key is required (Authorization: Bearer KEY)",
                              param="authorization")
    if not hmac.compare_digest(given.strip().encode(), admin_key.encode()):
        return error_response(403, "authorization: not the admin key", param="authorization")
    return None


def create_app(config: GatewayConfig, gateway: Gateway | None = None, *, config_path: str | Path | None = None,
               handle_sighup: bool = False) -> FastAPI:
    """The ASGI app serving ``config`` (``gateway``: a prepared one, for tests); ``config_path``: the file a
    reload re-reads; ``handle_sighup``: reload on SIGHUP (the server runs in the main thread)."""
    service = gateway if gateway is not None else Gateway(config, config_path=config_path)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await service.start()
        if handle_sighup and not install_sighup(service):
            log.warning("SIGHUP cannot be handled here (not the main thread): reload with POST /admin/reload")
        try:
            yield
        finally:
            if handle_sighup:
                remove_sighup()
            await service.stop()

    app = FastAPI(title="semsched gateway", version="1", lifespan=lifespan,
                  description="OpenAI-compatible front door: classification, admission, routing (semsched)")
    app.state.gateway = service
    app.add_middleware(BodyLimit, limit=config.admission.max_body_bytes)
    if service.tracing is not None:
        service.tracing.instrument(app)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: HttpRequest, error: RequestValidationError) -> Response:
        tier = service.tier_label(request.headers.get("x-semsched-tier", config.default_tier))
        service.metrics.rejections.labels(tier, "invalid").inc()
        service.metrics.requests.labels(tier, "rejected").inc()
        message, where = _body_error(request.headers.get("content-type"), error.errors()[0])
        request_id = request_id_for(request.headers.get("x-request-id"))
        log_access(request.url.path, 400, tier, "refused (invalid)", request_id)
        response = error_response(400, message, param=where)
        response.headers["x-request-id"] = request_id
        return response

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: HttpRequest, error: StarletteHTTPException) -> Response:
        return error_response(error.status_code, f"body: {error.detail}" if error.status_code == 400
                              else str(error.detail))

    @app.exception_handler(Exception)
    async def _crash(_: HttpRequest, error: Exception) -> Response:
        log.exception("request failed inside the gateway")
        return error_response(500, f"internal gateway error: {type(error).__name__}")

    # FastAPI parses and checks the body once (a bad field: 400 naming it, by the handler above); unknown fields
    # are kept by the models and reach the backend as sent.
    @app.post("/v1/completions", responses={400: {}, 429: {}, 503: {}, 504: {}})
    async def completions(request: HttpRequest, body: CompletionBody = Body(None)) -> Response:  # noqa: B008
        return await service.handle(request, body)

    @app.post("/v1/chat/completions", responses={400: {}, 429: {}, 503: {}, 504: {}})
    async def chat(request: HttpRequest, body: ChatBody = Body(None)) -> Response:  # noqa: B008
        return await service.handle(request, body)

    @app.get("/v1/models")
    async def models() -> Response:
        return await service.model_list()

    @app.get("/health")
    async def health() -> Response:
        return service.health()

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/admin/reload", responses={400: {}, 401: {}, 403: {}, 404: {}})
    async def admin_reload(request: HttpRequest) -> Response:
        refusal = admin_refusal(service.config.admin_key(), request.headers.get("authorization"))
        if refusal is not None:
            return refusal
        result = reload_config(service)
        return JSONResponse(result.as_dict(), status_code=400 if result.outcome == "refused" else 200)

    return app
