"""Outlier ejection (issue 32): a backend whose TTFT p90 is k times the others' leaves the pool for a cool-down
(counted, shown by /health), never the last one nor more than the allowed share; off by default."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from semsched.gateway.service import Gateway
from tests.fake_openai import fake_openai_app, running_app
from tests.gateway.conftest import config_for, metric, serving, wait_for

BODY = {"model": "tiny", "prompt": "hello there", "max_tokens": 2, "stream": True}
EJECTION = {"enabled": True, "window": 10, "min_requests": 5, "factor": 3.0, "cooldown_s": 30.0}


def _gateway(count: int, clock: list[float], **ejection: Any) -> Gateway:
    urls = [f"http://127.0.0.1:{9000 + i}" for i in range(count)]
    config = config_for(urls, routing={"outlier_ejection": {**EJECTION, **ejection}})
    return Gateway(config, now=lambda: clock[0])


def _feed(gateway: Gateway, index: int, ttft_s: float, times: int = 5) -> None:
    for _ in range(times):
        gateway.outliers.observe(gateway.pool.backends[index], ttft_s)


def test_a_slow_backend_is_ejected_for_its_cool_down_then_rejoins_with_an_empty_window() -> None:
    async def body() -> None:
        clock = [100.0]
        gateway = _gateway(3, clock)
        _feed(gateway, 1, 0.05)
        _feed(gateway, 2, 0.07)
        _feed(gateway, 0, 0.2, times=4)
        assert gateway.pool.backends[0].ejected_until is None  # fewer than min_requests: not judged yet
        _feed(gateway, 0, 0.2, times=1)  # p90 0.2 > 3 x median(0.05, 0.07) = 0.18
        slow = gateway.pool.backends[0]
        assert slow.ejected_until == clock[0] + EJECTION["cooldown_s"] and not slow.in_pool
        assert [b.name for b in gateway.pool.healthy()] == ["b1", "b2"]
        assert gateway.metrics.child(gateway.metrics.outlier_ejections, "b0")._value.get() == 1
        clock[0] += EJECTION["cooldown_s"] - 1
        gateway.outliers.release_expired()
        assert not slow.in_pool
        clock[0] += 1
        gateway.outliers.release_expired()
        assert slow.in_pool and slow.index not in gateway.outliers.windows
        await gateway.outliers.stop()

    asyncio.run(body())


def test_within_the_factor_nobody_is_ejected() -> None:
    async def body() -> None:
        gateway = _gateway(2, [0.0])
        _feed(gateway, 1, 0.1)
        _feed(gateway, 0, 0.29)  # under 3 x 0.1
        assert all(b.in_pool for b in gateway.pool.backends)

    asyncio.run(body())


def test_at_most_the_allowed_share_is_ejected_and_never_the_last_backend() -> None:
    async def body() -> None:
        gateway = _gateway(3, [0.0], max_ejected_fraction=0.34)  # one of three at most
        _feed(gateway, 2, 0.01)
        _feed(gateway, 1, 0.02)
        _feed(gateway, 0, 1.0)
        assert not gateway.pool.backends[0].in_pool
        _feed(gateway, 1, 1.0, times=10)  # now an outlier too (against b2), but one is out already
        assert gateway.pool.backends[1].in_pool
        pair = _gateway(2, [0.0], max_ejected_fraction=1.0)
        _feed(pair, 1, 0.01)
        _feed(pair, 0, 1.0)
        assert not pair.pool.backends[0].in_pool
        _feed(pair, 1, 5.0, times=10)  # the last one in the pool stays, however slow
        assert pair.pool.backends[1].in_pool
        for each in (gateway, pair):
            await each.outliers.stop()

    asyncio.run(body())


def test_off_by_default() -> None:
    gateway = Gateway(config_for(["http://127.0.0.1:9000", "http://127.0.0.1:9001"]))
    assert not gateway.config.routing.outlier_ejection.enabled
    _feed(gateway, 1, 0.01)
    _feed(gateway, 0, 10.0)
    assert gateway.outliers.windows == {} and all(b.in_pool for b in gateway.pool.backends)


def test_served_a_slow_backend_is_ejected_shown_by_health_and_gets_nothing_until_it_rejoins() -> None:
    slow, fast = fake_openai_app(first_token_delay_s=0.3), fake_openai_app()
    with running_app(slow) as slow_url, running_app(fast) as fast_url:
        config = config_for([slow_url, fast_url], routing={"router": "round-robin", "outlier_ejection": {
            **EJECTION, "cooldown_s": 5.0}})
        with serving(config) as gateway:
            def send() -> None:
                with httpx.stream("POST", f"{gateway}/v1/completions", json=BODY, timeout=30) as answer:
                    assert answer.status_code == 200
                    answer.read()

            wait_for(lambda: _send_until(send, lambda: metric(
                gateway, "semsched_gateway_outlier_ejections_total", backend="b0") == 1), timeout_s=60)
            health = httpx.get(f"{gateway}/health").json()
            ejected = health["backends"]["b0"]
            assert 0 < ejected["ejected_for_s"] <= 5.0 and ejected["ejected_until"].endswith("+00:00")
            assert "ejected_until" not in health["backends"]["b1"] and health["status"] == "ok"
            calls = len(slow.state.calls)
            for _ in range(4):
                send()
            assert len(slow.state.calls) == calls  # out of the rotation meanwhile
            slow.state.first_token_delay_s = 0.0
            wait_for(lambda: "ejected_until" not in httpx.get(f"{gateway}/health").json()["backends"]["b0"])
            calls = len(slow.state.calls)
            wait_for(lambda: _send_until(send, lambda: len(slow.state.calls) > calls))  # back in the rotation
            assert metric(gateway, "semsched_gateway_outlier_ejections_total", backend="b0") == 1
            assert metric(gateway, "semsched_gateway_outlier_ejections_total", backend="b1") == 0


def _send_until(send: Any, done: Any) -> bool:
    send()
    return bool(done())
