"""The OpenAI-compatible wire format, as plain functions: what one workload request sends, and what the server's
answers (a JSON body, or server-sent-event lines) say about tokens and errors.

A request asks for exactly its workload output length: ``max_tokens`` and ``min_tokens`` are both the request's
target output length and ``ignore_eos`` is true (``min_tokens``/``ignore_eos`` are vLLM extensions; other servers
ignore or refuse them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from semsched.bench.options import TIER_HEADER, BenchOptions
from semsched.core.request import Request

#: words that common tokenizers (Llama, GPT) encode as one token each when preceded by a space
_PROMPT_WORDS = (
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "they",
    "you",
    "were",
    "her",
    "she",
    "there",
    "one",
    "all",
    "we",
    "their",
    "can",
    "has",
    "more",
    "if",
    "will",
    "would",
    "about",
    "been",
)
#: HTTP statuses that mean the server refused the request for load (counted as rejected, not as errors)
REJECTION_STATUSES = frozenset({429, 503})
MAX_ERROR_CHARS = 300


def synthetic_prompt(request_id: str, prompt_tokens: int) -> str:
    """About ``prompt_tokens`` tokens of common words (one token per word in common tokenizers; the count is
    approximate, typically within a few tokens). The request id comes first, so that no two prompts share a
    prefix block and prefix caching cannot flatter the measurement."""
    count = max(prompt_tokens - 1, 0)
    words = [_PROMPT_WORDS[i % len(_PROMPT_WORDS)] for i in range(count)]
    return " ".join([f"{request_id}:", *words])


def prompt_of(request: Request) -> str:
    """The request's own text when its workload has one, else :func:`synthetic_prompt`."""
    if request.prompt_text:
        return request.prompt_text
    return synthetic_prompt(request.request_id, request.prompt_tokens)


def tier_xargs(request: Request) -> dict[str, Any]:
    """``vllm_xargs`` of a request (semsched's keys, see ``semsched.vllm.xargs``): tier and the SLOs it has."""
    xargs: dict[str, Any] = {"tier": request.tier}
    for name in ("ttft", "tpot", "e2e"):
        slo_s: float | None = getattr(request, f"{name}_slo_s")
        if slo_s is not None:
            xargs[f"{name}_slo_ms"] = slo_s * 1000.0
    if request.urgency is not None:
        xargs["urgency"] = request.urgency
    return xargs


def request_body(options: BenchOptions, model: str, request: Request) -> dict[str, Any]:
    """The JSON body that replays ``request`` on ``options.endpoint``."""
    num_tokens = request.target_output_tokens
    body: dict[str, Any] = {"model": model}
    prompt = prompt_of(request)
    if options.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    body |= {"max_tokens": num_tokens, "min_tokens": num_tokens, "ignore_eos": True, "stream": options.stream}
    if options.stream:
        body["stream_options"] = {"include_usage": True}
    if options.tier_fields == "all":
        body["priority"] = request.priority
    if options.tier_fields != "none":
        body["vllm_xargs"] = tier_xargs(request)
    return body


def request_headers(options: BenchOptions, request: Request) -> dict[str, str]:
    headers = options.base_headers()
    if options.tier_fields != "none":
        headers[TIER_HEADER] = request.tier
    return headers


# ---- answers ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Event:
    """What one server-sent event says: whether it carries output text, the usage's completion tokens, an
    error (message and code), and whether it is the ``[DONE]`` marker. ``abort`` holds the stop reason of a
    choice that ended with ``finish_reason="abort"`` (semsched's adapter: a rejection)."""

    has_text: bool = False
    completion_tokens: int | None = None
    error: str | None = None
    error_code: int | None = None
    done: bool = False
    abort: str | None = None


def parse_event(line: str) -> Event | None:
    """One SSE line: ``None`` for anything but a ``data:`` line; ``[DONE]``; or a JSON chunk. A chunk that is
    not JSON is an error event."""
    if not line.startswith("data:"):
        return None
    data = line[len("data:") :].strip()
    if data == "[DONE]":
        return Event(done=True)
    try:
        payload = json.loads(data)
    except json.JSONDecodeError:
        return Event(error=f"not JSON: {data[:80]!r}")
    if not isinstance(payload, dict):
        return Event(error=f"not a JSON object: {data[:80]!r}")
    return _chunk_event(payload)


def _chunk_event(payload: dict[str, Any]) -> Event:
    if "error" in payload:
        message, code = error_message(payload)
        return Event(error=message, error_code=code)
    choices = payload.get("choices") or []
    choice = choices[0] if choices and isinstance(choices[0], dict) else {}
    return Event(
        has_text=bool(choice_text(choice)),
        completion_tokens=usage_tokens(payload),
        abort=_abort_reason(choice),
    )


def choice_text(choice: dict[str, Any]) -> str:
    """The output text of one choice: completions' ``text``, chat's ``delta`` or ``message`` content (reasoning
    content counts too: it is output tokens)."""
    text = choice.get("text")
    if isinstance(text, str):
        return text
    message = choice.get("delta") or choice.get("message") or {}
    if not isinstance(message, dict):
        return ""
    parts = (message.get("content"), message.get("reasoning_content"), message.get("reasoning"))
    return "".join(p for p in parts if isinstance(p, str))


def usage_tokens(payload: dict[str, Any]) -> int | None:
    usage = payload.get("usage")
    if not isinstance(usage, dict):
        return None
    tokens = usage.get("completion_tokens")
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0 else None


def _abort_reason(choice: dict[str, Any]) -> str | None:
    if choice.get("finish_reason") != "abort":
        return None
    reason = choice.get("stop_reason")
    return reason if isinstance(reason, str) else "aborted by the server"


def error_message(payload: object) -> tuple[str, int | None]:
    """The message and code of an OpenAI-style error body (``{"error": {"message", "code"}}``, or vLLM's older
    ``{"message", "code"}``); the body itself, cut short, when it has neither."""
    if isinstance(payload, dict):
        error = payload.get("error", payload)
        if isinstance(error, dict):
            message, code = error.get("message"), error.get("code")
            if isinstance(message, str):
                return short(message), code if isinstance(code, int) and not isinstance(code, bool) else None
        elif isinstance(error, str):
            return short(error), None
    return short(json.dumps(payload) if not isinstance(payload, str) else payload), None


def body_error(content: bytes) -> str:
    """The message of an HTTP error's body, JSON or text."""
    text = content.decode("utf-8", errors="replace")
    try:
        return error_message(json.loads(text))[0]
    except json.JSONDecodeError:
        return short(text)


def short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


def completion_of(payload: object) -> tuple[int | None, str | None]:
    """A non-streamed answer's completion tokens (``usage``; ``None`` without one) and its abort reason."""
    if not isinstance(payload, dict):
        return None, None
    choices = payload.get("choices") or []
    choice = choices[0] if choices and isinstance(choices[0], dict) else {}
    return usage_tokens(payload), _abort_reason(choice)
