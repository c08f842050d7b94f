"""``vllm serve`` with vLLM's own scheduler and the OpenAI completions API, streamed: the base that the
adapter's server tests extend."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.vllm.harness import SERVED_MODEL_NAME, stream_completion

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.server]


@pytest.fixture(scope="module")
def client(default_server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=default_server, timeout=60.0) as client:
        yield client


def test_the_model_is_listed(client: httpx.Client) -> None:
    models = client.get("/v1/models").raise_for_status().json()
    assert [model["id"] for model in models["data"]] == [SERVED_MODEL_NAME]


@pytest.mark.parametrize("max_tokens", [1, 7, 40])
def test_a_stream_carries_exactly_max_tokens(client: httpx.Client, max_tokens: int) -> None:
    completion = stream_completion(
        client, {"prompt": "tell me about schedulers", "max_tokens": max_tokens, "ignore_eos": True}
    )
    assert len(completion.token_ids) == max_tokens
    assert completion.completion_tokens == max_tokens
    assert completion.finish_reason == "length"


def test_a_bad_parameter_is_a_400_and_the_server_goes_on(client: httpx.Client) -> None:
    with pytest.raises(httpx.HTTPStatusError) as error:
        stream_completion(client, {"prompt": "hello", "max_tokens": -1})
    assert error.value.response.status_code == 400
    assert "max_tokens" in error.value.response.json()["error"]["message"]

    completion = stream_completion(client, {"prompt": "hello", "max_tokens": 3, "ignore_eos": True})
    assert len(completion.token_ids) == 3
