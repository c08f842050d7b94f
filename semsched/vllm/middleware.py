"""API-server middleware: a malformed ``vllm_xargs`` or ``priority`` gets HTTP 400 before vLLM sees it.

vLLM's scheduler runs in the engine process, where a bad per-request input can only end that request (the
adapter aborts it with the reason in ``stop_reason``). To answer such requests with a proper 400, start the
server with the middleware too::

    vllm serve MODEL --scheduler-cls semsched.vllm.Scheduler --middleware semsched.vllm.XargsValidationMiddleware

It reads the JSON body of a ``POST`` to every vLLM 0.32 route whose JSON body carries ``priority`` and
``vllm_xargs`` (:data:`CHECKED_PATHS`: completions, chat completions and their batch form, responses, Anthropic
messages, and SageMaker's ``/invocations``, which routes to those), checks them with
:func:`semsched.vllm.xargs.parse_request_options`, and passes every other request through untouched (the body is
replayed to vLLM unchanged). It is plain ASGI, so streaming responses are not buffered. (The audio routes take
form data; there the engine's check ends a bad request, as without the middleware.)

Built in the API-server process, it also makes a streamed request the adapter rejects end with its reason
(:mod:`semsched.vllm.frontend`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from semsched.core.request import InvalidRequestError
from semsched.vllm.xargs import parse_request_options

logger = logging.getLogger("vllm.semsched")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CHECKED_PATHS = frozenset({
    "/v1/completions", "/v1/chat/completions", "/v1/chat/completions/batch", "/v1/responses", "/v1/messages",
    "/invocations",
})
MAX_BODY_BYTES = 64 * 1024 * 1024  # beyond this the body is passed through unchecked (vLLM applies its limits)


class XargsValidationMiddleware:
    """ASGI middleware: a malformed ``priority`` or ``vllm_xargs`` gets HTTP 400 naming the field and the limit."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        _install_frontend()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST" or scope.get("path") not in CHECKED_PATHS:
            await self.app(scope, receive, send)
            return
        messages, body = await _read_body(receive)
        error = _validate(body)
        if error is not None:
            await _send_400(send, error)
            return
        await self.app(scope, _replay(messages, receive), send)


async def _read_body(receive: Receive) -> tuple[list[Message], bytes]:
    messages: list[Message] = []
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message.get("type") != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size <= MAX_BODY_BYTES:
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return messages, b"".join(chunks) if size <= MAX_BODY_BYTES else b""


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay


def _install_frontend() -> None:
    """Streamed rejections end with their reason (needs vLLM: this runs in its API server)."""
    try:
        from semsched.vllm import frontend
    except ImportError:  # no vLLM here (unit tests of the middleware alone)
        return
    frontend.install()


def _validate(body: bytes) -> str | None:
    """The error message for an invalid semsched input, or None (also for bodies vLLM will judge itself)."""
    try:
        data = json.loads(body) if body else None
    except (ValueError, RecursionError):  # malformed JSON, an integer over Python's digit limit, deep nesting
        return None  # not ours to judge: vLLM answers a body it cannot parse itself
    if not isinstance(data, dict):
        return None
    xargs = data.get("vllm_xargs")
    if xargs is not None and not isinstance(xargs, dict):
        return f"vllm_xargs: must be a JSON object (got {type(xargs).__name__})"
    try:
        parse_request_options(data.get("priority"), xargs)
    except InvalidRequestError as error:
        return str(error)
    return None


async def _send_400(send: Send, message: str) -> None:
    param = message.split(":", 1)[0]
    payload = {"error": {"message": message, "type": "BadRequestError", "param": param, "code": 400}}
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 400, "headers": headers})
    await send({"type": "http.response.body", "body": body})
