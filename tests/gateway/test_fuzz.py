"""Fuzzing the gateway's edge from its own OpenAPI schema: whatever the body, headers or route, the answer is a
4xx or a 200, never a 5xx, and the gateway keeps serving.

Bodies are drawn from the schema's properties (each known field given values of its declared type and of every
other JSON type, plus unknown fields) and from arbitrary JSON; the backend is a fake that answers every
generation with 400 (``status_code``), so a body that passes the gateway reaches it and the gateway relays its
refusal: the fuzzing stays on the gateway's side, fast.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fake_openai import fake_openai_app, running_app
from tests.gateway.conftest import config_for, serving

JSON_SCALARS = st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats(
    allow_nan=False) | st.text(max_size=40)
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.text(max_size=12), inner, max_size=4), max_leaves=12)
TIERS = st.sampled_from(["SYSTEM", "premium", "STANDARD", "Background", "", "GOLD", "x" * 300])


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[str, dict[str, Any]]]:
    backend = fake_openai_app(status_code=400)
    with running_app(backend) as url, serving(config_for([url])) as base:
        schema = httpx.get(f"{base}/openapi.json").json()
        yield base, schema


def _properties(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return dict(schema["components"]["schemas"][name]["properties"])


@st.composite
def bodies(draw: st.DrawFn, properties: dict[str, Any]) -> Any:
    """A JSON object with some of the schema's fields (valid-looking or not) and some unknown ones, or any JSON."""
    if draw(st.integers(0, 9)) == 0:
        return draw(JSON_VALUES)
    body: dict[str, Any] = {}
    for name in draw(st.lists(st.sampled_from(sorted(properties)), unique=True)):
        body[name] = draw(JSON_VALUES | _typed(properties[name]))
    body.update(draw(st.dictionaries(st.text(max_size=10), JSON_VALUES, max_size=2)))
    return body


def _typed(spec: dict[str, Any]) -> st.SearchStrategy[Any]:
    kinds = {option.get("type") for option in spec.get("anyOf", [spec])}
    strategies: list[st.SearchStrategy[Any]] = [st.just("tiny")]
    if "integer" in kinds:
        strategies.append(st.integers(min_value=-(2**40), max_value=2**40))
    if "string" in kinds:
        strategies.append(st.text(max_size=30))
    if "boolean" in kinds:
        strategies.append(st.booleans())
    if "array" in kinds:
        strategies.append(st.lists(st.integers(0, 50_000) | st.text(max_size=5), max_size=5))
        strategies.append(st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system"]),
                                                          "content": st.text(max_size=20)}), max_size=3))
    if "object" in kinds:
        strategies.append(st.dictionaries(st.sampled_from(["tier", "urgency", "ttft_slo_ms", "tpot_slo_ms",
                                                           "predicted_lengths", "predicted_probs", "ttft_slo",
                                                           "other"]), JSON_SCALARS, max_size=3))
    return st.one_of(strategies)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(data=st.data())
def test_no_body_header_or_route_makes_the_gateway_fail(gateway: tuple[str, dict[str, Any]],
                                                         data: st.DataObject) -> None:
    base, schema = gateway
    path, model = data.draw(st.sampled_from([("/v1/completions", "CompletionBody"),
                                             ("/v1/chat/completions", "ChatBody")]))
    body = data.draw(bodies(_properties(schema, model)))
    headers = {"x-semsched-tier": data.draw(TIERS)}
    if data.draw(st.booleans()):
        headers["authorization"] = "Bearer k" + data.draw(st.text(alphabet="abc-", max_size=8))
    raw = json.dumps(body).encode() if data.draw(st.integers(0, 9)) else data.draw(st.binary(max_size=30))
    answer = httpx.post(base + path, content=raw, headers={**headers, "content-type": "application/json"},
                        timeout=30)
    assert answer.status_code < 500, (answer.status_code, answer.text, body)
    if answer.status_code >= 400:
        assert "message" in answer.json().get("error", {}), answer.text


def test_still_serving_after_the_fuzzing(gateway: tuple[str, dict[str, Any]]) -> None:
    base, _ = gateway
    assert httpx.get(f"{base}/health").status_code == 200
    answer = httpx.post(f"{base}/v1/completions", json={"model": "tiny", "prompt": "hi", "max_tokens": 2})
    assert answer.status_code == 400 and "forced status" in answer.json()["error"]["message"]
