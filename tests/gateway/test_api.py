"""The gateway's edge: bodies that are not what they claim get one 400 naming the field, or the body itself."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.fake_openai import fake_openai_app, running_app
from tests.gateway.conftest import config_for, serving

BODY = '"model": "tiny", "prompt": "hi", "max_tokens": 2'


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[str, list[dict[str, object]]]]:
    backend = fake_openai_app()
    with running_app(backend) as url, serving(config_for([url])) as base:
        yield base, backend.state.calls


@pytest.mark.parametrize(("extra", "field", "value"), [
    (', "temperature": 1e400', "temperature", "inf"),
    (', "top_p": -1e999', "top_p", "-inf"),
    (', "vllm_xargs": {"ttft_slo_ms": NaN}', "vllm_xargs.ttft_slo_ms", "nan"),
    (', "logit_bias": {"50256": Infinity}', "logit_bias.50256", "inf"),
    (', "stop": ["a"], "extra": [1, [2, 1e400]]', "extra[1][1]", "inf"),
])
def test_a_number_that_is_not_finite_is_a_400_naming_its_field(
        gateway: tuple[str, list[dict[str, object]]], extra: str, field: str, value: str) -> None:
    """Issue 28: ``temperature: 1e400`` was rewritten to null and answered 200."""
    base, calls = gateway
    before = len(calls)
    answer = httpx.post(f"{base}/v1/completions", content="{" + BODY + extra + "}",
                        headers={"content-type": "application/json"})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == field and error["message"] == f"{field}: must be a finite number (got {value})"
    assert len(calls) == before  # nothing forwarded


Served = tuple[str, list[dict[str, object]]]


def test_truncated_json_names_the_body_not_a_character_offset(gateway: Served) -> None:
    base, _ = gateway
    answer = httpx.post(f"{base}/v1/completions", content="{" + BODY,
                        headers={"content-type": "application/json"})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "body", error  # was "28": the offset where the parser stopped
    assert error["message"].startswith("body: not valid JSON at character ")


@pytest.mark.parametrize("content", ["{" + BODY + "}", "hello"])
def test_a_body_that_is_not_sent_as_json_is_told_json_is_expected(
        gateway: tuple[str, list[dict[str, object]]], content: str) -> None:
    base, _ = gateway
    answer = httpx.post(f"{base}/v1/chat/completions", content=content, headers={"content-type": "text/plain"})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "body"
    assert error["message"] == "body: JSON is expected (content-type: application/json; got text/plain)"


@pytest.mark.parametrize(("extra", "field"), [(', "n": 1000', "n"), (', "best_of": 17, "n": 2', "best_of")])
def test_more_sequences_than_max_n_is_a_400_naming_the_field(
        gateway: tuple[str, list[dict[str, object]]], extra: str, field: str) -> None:
    base, _ = gateway
    answer = httpx.post(f"{base}/v1/completions", content="{" + BODY + extra + "}",
                        headers={"content-type": "application/json"})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == field and "admission.max_n" in error["message"]
    assert httpx.post(f"{base}/v1/completions", content="{" + BODY + ', "n": 16}',
                      headers={"content-type": "application/json"}).status_code == 200
