"""The wire format as plain functions: prompts, SSE events, error bodies and token times."""

from __future__ import annotations

from semsched.bench.protocol import body_error, parse_event, synthetic_prompt
from semsched.bench.report import token_times_s


def test_a_synthetic_prompt_has_about_the_asked_words_and_a_unique_start() -> None:
    prompt = synthetic_prompt("7", 50)
    assert len(prompt.split()) == 50
    assert prompt.startswith("7:") and synthetic_prompt("8", 50) != prompt


def test_events() -> None:
    assert parse_event(": keep-alive") is None
    done = parse_event("data: [DONE]")
    assert done is not None and done.done
    text = parse_event('data: {"choices": [{"index": 0, "text": " a", "finish_reason": null}]}')
    assert text is not None and text.has_text and not text.done
    role_only = parse_event('data: {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}')
    assert role_only is not None and not role_only.has_text
    usage = parse_event('data: {"choices": [], "usage": {"completion_tokens": 9}}')
    assert usage is not None and usage.completion_tokens == 9
    error = parse_event('data: {"error": {"message": "overloaded", "code": 503}}')
    assert error is not None and (error.error, error.error_code) == ("overloaded", 503)
    abort = parse_event('data: {"choices": [{"text": "", "finish_reason": "abort", "stop_reason": "shed: x"}]}')
    assert abort is not None and abort.abort == "shed: x"
    broken = parse_event("data: {not json")
    assert broken is not None and broken.error is not None


def test_error_bodies() -> None:
    assert body_error(b'{"error": {"message": "too many", "code": 429}}') == "too many"
    assert body_error(b'{"message": "old style"}') == "old style"
    assert body_error(b"plain text") == "plain text"


def test_token_times_follow_the_usage_count() -> None:
    chunks = [1.0, 2.0, 3.0]
    assert token_times_s(chunks, None) == chunks
    assert token_times_s(chunks, 3) == chunks
    more = token_times_s(chunks, 7)
    assert len(more) == 7 and more == sorted(more) and set(more) == set(chunks)
    assert token_times_s(chunks, 2) == [1.0, 3.0]
    assert token_times_s(chunks, 0) == []
    assert token_times_s([], 5) == []
