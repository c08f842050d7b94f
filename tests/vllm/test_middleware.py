import asyncio
import json
from typing import Any

from semsched.vllm.middleware import XargsValidationMiddleware


class _App:
    """Records the body it receives and answers 200."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.bodies.append(body)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def _call(path: str, payload: object, *, chunks: int = 1, method: str = "POST") -> tuple[int, bytes, _App]:
    app = _App()
    middleware = XargsValidationMiddleware(app)
    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    size = max(1, -(-len(raw) // chunks))
    parts = [raw[i:i + size] for i in range(0, len(raw), size)] or [b""]
    messages = [{"type": "http.request", "body": p, "more_body": i < len(parts) - 1} for i, p in enumerate(parts)]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path}
    asyncio.run(middleware(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, body, app


def test_valid_request_passes_with_its_body_intact() -> None:
    payload = {"model": "m", "prompt": "hi", "priority": 2, "vllm_xargs": {"tier": "PREMIUM", "ttft_slo_ms": 200}}
    status, _, app = _call("/v1/completions", payload, chunks=3)
    assert status == 200
    assert json.loads(app.bodies[0]) == payload


def test_bad_xargs_get_400_naming_the_field() -> None:
    status, body, app = _call("/v1/chat/completions", {"messages": [], "vllm_xargs": {"ttft_slo_ms": -5}})
    assert status == 400 and app.bodies == []
    error = json.loads(body)["error"]
    assert error["param"] == "vllm_xargs.ttft_slo_ms" and "> 0" in error["message"]


def test_non_object_xargs_and_bad_priority_get_400() -> None:
    assert _call("/v1/completions", {"vllm_xargs": [1, 2]})[0] == 400
    status, body, _ = _call("/v1/completions", {"priority": 1.5})
    assert status == 400 and json.loads(body)["error"]["param"] == "priority"


def test_other_routes_methods_and_malformed_json_pass_through() -> None:
    assert _call("/v1/models", {"vllm_xargs": {"ttft_slo_ms": -5}})[0] == 200
    assert _call("/v1/completions", {"vllm_xargs": {"ttft_slo_ms": -5}}, method="GET")[0] == 200
    status, _, app = _call("/v1/completions", b"{not json")
    assert status == 200 and app.bodies == [b"{not json"]


def test_huge_integers_get_400_naming_the_field_and_the_limit() -> None:
    huge = b"1" + b"0" * 400
    status, body, _ = _call("/v1/completions", b'{"prompt": "hi", "vllm_xargs": {"ttft_slo_ms": ' + huge + b"}}")
    error = json.loads(body)["error"]
    assert status == 400 and error["param"] == "vllm_xargs.ttft_slo_ms" and "<= 86400000 ms" in error["message"]


def test_invocations_and_other_generation_routes_are_checked() -> None:
    for path in ("/invocations", "/v1/messages", "/v1/responses", "/v1/chat/completions/batch"):
        status, body, app = _call(path, {"prompt": "hi", "vllm_xargs": {"ttft_slo": 200}})
        assert status == 400 and app.bodies == [], path
        assert "did you mean 'ttft_slo_ms'" in json.loads(body)["error"]["message"]


def test_a_body_python_cannot_parse_is_left_to_vllm() -> None:
    over_digit_limit = b'{"priority": ' + b"9" * 5000 + b"}"  # json raises ValueError, not JSONDecodeError
    status, _, app = _call("/v1/completions", over_digit_limit)
    assert status == 200 and app.bodies == [over_digit_limit]
