"""The gateway's edge: request bodies (pydantic; the OpenAPI schema is built from them), who is calling, and the
OpenAI-style error answers.

Bodies are checked for what the gateway itself reads (``model``, ``prompt``/``messages``, ``max_tokens``,
``stream``, ``priority``, ``vllm_xargs``); every other field is passed to the backend as sent. A bad field is a 400
whose message starts with its name (``max_tokens: ...``, ``vllm_xargs.ttft_slo_ms: ...``), in OpenAI's error shape
``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse

from semsched.gateway.config import ApiKeyConfig, GatewayConfig

MAX_TOKENS_LIMIT = 1 << 24
PRIORITY_LIMIT = 2**31 - 1
XargValue = str | int | float | bool | list[int] | list[float]


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, max_length=512)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT)
    stream: bool = False
    n: int | None = Field(default=None, ge=1, le=PRIORITY_LIMIT,
        description="sequences to return; the request weighs that many (admission.max_n at most)")
    best_of: int | None = Field(default=None, ge=1, le=PRIORITY_LIMIT,
        description="sequences to generate (vLLM); the request weighs the larger of n and best_of")
    priority: int | None = Field(default=None, ge=-PRIORITY_LIMIT, le=PRIORITY_LIMIT,
        description="lower is more important; a request may make itself less important than its tier, never more")
    vllm_xargs: dict[str, XargValue] | None = Field(default=None,
        description="semsched's per-request keys (tier, urgency, ttft_slo_ms, tpot_slo_ms, e2e_slo_ms, "
                          "predicted_output_tokens, predicted_lengths/predicted_probs) and any other")


class CompletionBody(_Body):
    """``POST /v1/completions``."""

    prompt: str | list[str] | list[int] | list[list[int]] = Field(description="text, texts, or token ids")


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str = Field(min_length=1, max_length=64)
    content: str | list[dict[str, Any]] | None = None


class ChatBody(_Body):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT)


def prompt_text(body: CompletionBody | ChatBody) -> tuple[str, int | None]:
    """The text to classify, and the exact token count where the body gives token ids."""
    if isinstance(body, ChatBody):
        parts: list[str] = []
        for message in body.messages:
            if isinstance(message.content, str):
                parts.append(message.content)
            elif isinstance(message.content, list):
                parts += [str(p.get("text", "")) for p in message.content if p.get("type") == "text"]
        return "\n".join(parts), None
    prompt = body.prompt
    if isinstance(prompt, str):
        return prompt, None
    if all(isinstance(p, str) for p in prompt):
        return "\n".join(str(p) for p in prompt), None
    if all(isinstance(p, int) for p in prompt):
        return "", max(1, len(prompt))
    return "", max(1, sum(len(p) for p in prompt if isinstance(p, list)))


def output_budget(body: CompletionBody | ChatBody, default: int) -> int:
    return given_budget(body) or default


def given_budget(body: CompletionBody | ChatBody) -> int | None:
    """The output budget the body sets (``max_completion_tokens`` for chat, else ``max_tokens``), or None."""
    if isinstance(body, ChatBody) and body.max_completion_tokens is not None:
        return body.max_completion_tokens
    return body.max_tokens


def sequences(body: CompletionBody | ChatBody) -> int:
    """How many sequences the request makes the engine generate: the larger of ``n`` and ``best_of`` (1)."""
    return max(body.n or 1, body.best_of or 1)


def non_finite(value: Any, where: str = "") -> tuple[str, float] | None:
    """The path (``temperature``, ``vllm_xargs.ttft_slo_ms``, ``messages[0].x``) and value of the first number in
    ``value`` that is not finite (JSON has no such numbers; Python's parser reads ``1e400`` as infinity), or
    None."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "body", value
    if isinstance(value, dict):
        for key, item in value.items():
            found = non_finite(item, f"{where}.{key}" if where else str(key))
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = non_finite(item, f"{where}[{index}]")
            if found is not None:
                return found
    return None


class Identity(BaseModel):
    tier: str
    tenant: str | None = None


class EdgeError(Exception):
    """An answer other than 200 decided at the edge: status, message, the field it is about, a metric reason."""

    def __init__(self, status: int, message: str, *, param: str | None = None, reason: str = "invalid",
                 retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.reason = status, message, param, reason
        self.retry_after_s = retry_after_s

    def response(self) -> JSONResponse:
        return error_response(self.status, self.message, param=self.param, retry_after_s=self.retry_after_s)


_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 413: "invalid_request_error", 429: "rate_limit_error",
          503: "service_unavailable", 504: "timeout"}


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": _TYPES.get(status, "server_error"), "param": param,
                      "code": status}}


def error_response(status: int, message: str, *, param: str | None = None,
                   retry_after_s: int | None = None) -> JSONResponse:
    headers = {"retry-after": str(retry_after_s)} if retry_after_s is not None else None
    return JSONResponse(error_body(status, message, param), status_code=status, headers=headers)


def identify(config: GatewayConfig, headers: dict[str, str]) -> Identity:
    """The tier and tenant of a request: its API key's when the map knows it, else the tier headers (when
    trusted), else ``default_tier``. Raises :class:`EdgeError` (401 unknown key, 400 unknown tier)."""
    auth = headers.get("authorization", "")
    key = auth[7:].strip() if auth.lower().startswith("bearer ") else None
    entry: ApiKeyConfig | None = config.client_keys().get(key) if key else None
    if entry is not None:
        return Identity(tier=entry.tier, tenant=entry.tenant)
    if config.require_api_key:
        raise EdgeError(401, "authorization: a known API key is required (Authorization: Bearer KEY)",
                        param="authorization", reason="unauthorized")
    tier, tenant = config.default_tier, None
    if config.trust_tier_headers:
        tier = headers.get("x-semsched-tier", tier).strip() or tier
        tenant = headers.get("x-semsched-tenant") or None
        if tenant is not None and len(tenant) > 128:
            raise EdgeError(400, "x-semsched-tenant: at most 128 characters", param="x-semsched-tenant")
    return Identity(tier=tier, tenant=tenant)
