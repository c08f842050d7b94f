"""``routing.router: prefix-affinity`` in the gateway (issue 32): a request's prefix hashes come from its prompt
(semsched/gateway/prefix.py), and requests that repeat a prefix go to the backend that served it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from semsched.core.prefix import PROMPT_CHUNK_CHARS
from semsched.gateway.api import ChatBody, CompletionBody
from semsched.gateway.prefix import TOKEN_BLOCK_SIZE, request_prefix_hashes
from tests.fake_openai import fake_openai_app, running_app
from tests.gateway.conftest import config_for, metric, serving, wait_for

CONVERSATIONS = [f"Conversation {k}: " + f"a long shared beginning number {k} " * 8 for k in range(6)]


def test_prefix_hashes_from_text_and_from_token_ids() -> None:
    text = CompletionBody(model="m", prompt="x" * (3 * PROMPT_CHUNK_CHARS + 5))
    assert len(request_prefix_hashes(text, text.prompt) or ()) == 3  # type: ignore[arg-type]
    ids = CompletionBody(model="m", prompt=list(range(2 * TOKEN_BLOCK_SIZE + 1)))
    assert len(request_prefix_hashes(ids, "") or ()) == 2
    assert request_prefix_hashes(CompletionBody(model="m", prompt="short"), "short") is None
    chat = ChatBody(model="m", messages=[{"role": "user", "content": CONVERSATIONS[0]}])
    turn = ChatBody(model="m", messages=[{"role": "user", "content": CONVERSATIONS[0]},
                                         {"role": "assistant", "content": "an answer"}])
    first, second = request_prefix_hashes(chat, CONVERSATIONS[0]), request_prefix_hashes(
        turn, CONVERSATIONS[0] + "\nan answer")
    assert first and second and second[:len(first)] == first


@pytest.mark.parametrize(("router", "expected"), [("prefix-affinity", 0), ("least-outstanding", 1)])
def test_a_repeated_prefix_goes_to_the_backend_that_served_it(router: str, expected: int) -> None:
    """Turn 1 of a conversation goes to backend 0 (both idle); a long request without a known prefix then
    occupies backend 0; turn 2 follows its prefix to backend 0 under prefix-affinity (its load is within the
    slack), where least-outstanding sends it to the idle backend 1."""
    backends = [fake_openai_app(token_delay_s=0.05), fake_openai_app(token_delay_s=0.05)]
    config = {"routing": {"router": router}}
    with running_app(backends[0]) as url0, running_app(backends[1]) as url1, \
            serving(config_for([url0, url1], **config)) as gateway, ThreadPoolExecutor(1) as pool:
        def post(prompt: str, max_tokens: int) -> int:
            body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens}
            return httpx.post(f"{gateway}/v1/completions", json=body, timeout=30).status_code

        assert post(CONVERSATIONS[0] + " first question", 1) == 200
        assert len(backends[0].state.calls) == 1
        busy = pool.submit(post, CONVERSATIONS[1], 40)
        wait_for(lambda: backends[0].state.in_flight == 1)
        assert post(CONVERSATIONS[0] + " first question, its answer, and a second question", 1) == 200
        assert busy.result() == 200
        turns = [call for call in backends[expected].state.calls if call["prompt"].startswith(CONVERSATIONS[0])]
        assert len(turns) == (2 if expected == 0 else 1)
        assert metric(gateway, "semsched_gateway_routed_total", router=router) == 3
