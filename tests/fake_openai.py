"""A fake OpenAI-compatible server (vLLM's routes and metric names) for the bench and gateway tests.

``fake_openai_app(...)`` builds the app; its behaviour lives on ``app.state`` and may be changed while a test
runs (``app.state.token_delay_s``, ``healthy``, ``fail_after_tokens``, ``status_code``, ...). Every generation
call is recorded in ``app.state.calls``: the JSON body, plus the request's headers under ``"_headers"``.
``running_app(app)`` serves it on a free local port in a background thread and yields the base URL; leaving
the context stops the server abruptly (open streams are cut), which is how a test makes a backend die.

Generation: exactly ``max_tokens`` tokens (default 16; chat also reads ``max_completion_tokens``), each the text
``" tok"``, after ``first_token_delay_s`` and then ``token_delay_s`` between tokens. ``fail_after_tokens=k``
cuts a stream after k tokens without ``[DONE]`` (a non-streamed answer becomes a 500); ``status_code`` makes
every generation endpoint answer that HTTP error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

DEFAULT_MAX_TOKENS = 16
TOKEN_TEXT = " tok"
#: the fake's KV cache holds this many requests: ``vllm:kv_cache_usage_perc`` is in-flight / this
KV_CAPACITY_REQUESTS = 100
STARTUP_TIMEOUT_S = 10.0


class StreamCut(Exception):
    """Raised inside a streaming body to break the connection mid-stream (``fail_after_tokens``)."""


def fake_openai_app(
    *,
    model: str = "tiny",
    first_token_delay_s: float = 0.0,
    token_delay_s: float = 0.0,
    fail_after_tokens: int | None = None,
    status_code: int | None = None,
) -> FastAPI:
    """The fake server's app; every keyword is a mutable setting on ``app.state`` of the same name."""
    app = FastAPI()
    state = app.state
    state.model = model
    state.first_token_delay_s = first_token_delay_s
    state.token_delay_s = token_delay_s
    state.fail_after_tokens = fail_after_tokens
    state.status_code = status_code
    state.healthy = True
    state.calls = []
    state.in_flight = 0
    state.max_in_flight = 0  # the most generation calls in flight at once so far

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200 if state.healthy else 503)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": state.model, "object": "model", "created": 0, "owned_by": "fake"}],
        }

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        label = f'{{model_name="{state.model}"}}'
        usage = min(1.0, state.in_flight / KV_CAPACITY_REQUESTS)
        text = (
            f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{label} {state.in_flight}\n"
            f"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{label} 0\n"
            f"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{label} {usage}\n"
        )
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await _generate(app, request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await _generate(app, request, chat=True)

    return app


async def _generate(app: FastAPI, request: Request, *, chat: bool) -> Response:
    state = app.state
    try:
        body = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        return _error(400, f"invalid JSON body: {error}")
    if not isinstance(body, dict):
        return _error(400, "the body must be a JSON object")
    state.calls.append({**body, "_headers": dict(request.headers)})
    if state.status_code is not None:
        return _error(int(state.status_code), f"fake: forced status {state.status_code}")
    num_tokens = _max_tokens(body, chat=chat)
    if num_tokens is None:
        return _error(400, "max_tokens: must be an integer >= 1")
    prompt_tokens = _prompt_tokens(body, chat=chat)
    if body.get("stream"):
        options = body.get("stream_options") or {}
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        chunks = _stream(app, chat=chat, num_tokens=num_tokens, prompt_tokens=prompt_tokens, usage=include_usage)
        return StreamingResponse(chunks, media_type="text/event-stream")
    return await _complete(app, chat=chat, num_tokens=num_tokens, prompt_tokens=prompt_tokens)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "fake_error", "code": status}}, status_code=status)


def _max_tokens(body: dict[str, Any], *, chat: bool) -> int | None:
    value = body.get("max_completion_tokens") if chat else None
    if value is None:
        value = body.get("max_tokens", DEFAULT_MAX_TOKENS)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return value


def _prompt_tokens(body: dict[str, Any], *, chat: bool) -> int:
    """Whitespace-separated words of the prompt: the fake's stand-in for a tokenizer."""
    if chat:
        messages = body.get("messages") or []
        text = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
    else:
        prompt = body.get("prompt", "")
        text = prompt if isinstance(prompt, str) else " ".join(map(str, prompt))
    return len(text.split())


async def _sleep_before(index: int, app: FastAPI) -> None:
    delay_s = app.state.first_token_delay_s if index == 0 else app.state.token_delay_s
    if delay_s > 0:
        await asyncio.sleep(delay_s)


async def _stream(
    app: FastAPI, *, chat: bool, num_tokens: int, prompt_tokens: int, usage: bool
) -> AsyncIterator[str]:
    state = app.state
    state.in_flight += 1
    state.max_in_flight = max(state.max_in_flight, state.in_flight)
    try:
        for index in range(num_tokens):
            if state.fail_after_tokens is not None and index >= state.fail_after_tokens:
                raise StreamCut(f"fake: stream cut after {index} tokens")
            await _sleep_before(index, app)
            last = index == num_tokens - 1
            yield _sse(_chunk(state.model, chat=chat, text=TOKEN_TEXT, finish_reason="length" if last else None))
        if usage:
            yield _sse(_usage_chunk(state.model, chat=chat, prompt_tokens=prompt_tokens, num_tokens=num_tokens))
        yield "data: [DONE]\n\n"
    finally:
        state.in_flight -= 1


async def _complete(app: FastAPI, *, chat: bool, num_tokens: int, prompt_tokens: int) -> Response:
    state = app.state
    state.in_flight += 1
    state.max_in_flight = max(state.max_in_flight, state.in_flight)
    try:
        for index in range(num_tokens):
            if state.fail_after_tokens is not None and index >= state.fail_after_tokens:
                return _error(500, f"fake: failed after {index} tokens")
            await _sleep_before(index, app)
    finally:
        state.in_flight -= 1
    text = TOKEN_TEXT * num_tokens
    choice: dict[str, Any] = (
        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
        if chat
        else {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
    )
    return JSONResponse(
        {
            "id": "fake-0",
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": state.model,
            "choices": [choice],
            "usage": _usage(prompt_tokens, num_tokens),
        }
    )


def _chunk(model: str, *, chat: bool, text: str, finish_reason: str | None) -> dict[str, Any]:
    choice: dict[str, Any] = (
        {"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": finish_reason}
        if chat
        else {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    )
    return {
        "id": "fake-0",
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
    }


def _usage_chunk(model: str, *, chat: bool, prompt_tokens: int, num_tokens: int) -> dict[str, Any]:
    return {
        "id": "fake-0",
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [],
        "usage": _usage(prompt_tokens, num_tokens),
    }


def _usage(prompt_tokens: int, num_tokens: int) -> dict[str, int]:
    total = prompt_tokens + num_tokens
    return {"prompt_tokens": prompt_tokens, "completion_tokens": num_tokens, "total_tokens": total}


def _sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload)}\n\n"


# ---- serving ------------------------------------------------------------------------------------------------
class _ServerThread:
    """A uvicorn server on an already bound socket, in a thread with its own event loop."""

    def __init__(self, app: FastAPI) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        # log_config=None: logs go to the logging module (pytest shows them on failure), global config untouched
        config = uvicorn.Config(app, log_config=None, timeout_graceful_shutdown=1, lifespan="auto")
        self.server = uvicorn.Server(config)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._run, name=f"fake-openai-{self.port}", daemon=True)

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        await self.server.serve(sockets=[self.sock])

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"fake OpenAI server on port {self.port} did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        """Stop at once: open connections are aborted (a dying backend), not drained."""
        self.server.should_exit = True
        self.server.force_exit = True
        if self.loop is not None and self.thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self.loop.call_soon_threadsafe(self._abort_connections)
        self.thread.join(timeout=10)
        self.sock.close()

    def _abort_connections(self) -> None:
        for connection in list(self.server.server_state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.abort()


@contextlib.contextmanager
def running_app(app: FastAPI) -> Iterator[str]:
    """Serve ``app`` on a free local port; yields ``http://127.0.0.1:PORT``; stops the server on exit."""
    server = _ServerThread(app)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()
