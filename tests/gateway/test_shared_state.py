"""Gateway replicas sharing state through a real redis-server (tests/gateway/redis_server.py), against fake
OpenAI backends: fleet-wide in-flight caps, shedding on the fleet's quantile, Redis going away and coming back;
and the SharedState primitives, locally and in Redis."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis as redis_client
from fastapi import FastAPI

from semsched.gateway.app import create_app
from semsched.gateway.config import GatewayConfig, SharedStateConfig
from semsched.gateway.service import Gateway
from semsched.gateway.shared import Charge, make_shared_state
from tests.fake_openai import fake_openai_app, running_app
from tests.gateway.conftest import config_for as fast_health_config
from tests.gateway.conftest import metric, wait_for
from tests.gateway.redis_server import RedisServer, redis  # noqa: F401  (the fixture)

BODY = {"model": "tiny", "prompt": "hello there", "max_tokens": 3, "stream": True}
#: a generous op_timeout_s: on a loaded CI machine a Redis reply can take over the default 0.5 s, and a replica
#: then (rightly) serves on its own state, which the cap tests would read as a broken cap; the outage tests stop
#: Redis, which fails operations at once
SYNC = {"sync_interval_s": 0.05, "op_timeout_s": 5.0, "reconnect_interval_s": 0.2}


#: these tests are about shared state, not health: a loaded CI machine once took over the fast health checks'
#: 0.5 s to answer /health during a burst, both backends left the pool for 0.1 s and the burst read 503s
TOLERANT_HEALTH = {"health_timeout_s": 5.0, "unhealthy_after": 3}


def config_for(urls: list[str], **settings: Any) -> GatewayConfig:
    """:func:`tests.gateway.conftest.config_for` with health checks that a loaded machine does not fail."""
    routing = {**TOLERANT_HEALTH, **settings.pop("routing", {})}
    return fast_health_config(urls, routing=routing, **settings)


@contextmanager
def replicas(config: GatewayConfig, count: int = 2) -> Iterator[list[tuple[str, Gateway]]]:
    """``count`` gateways built from the same ``config``, each served on its own port: (url, gateway)."""
    with ExitStack() as stack:
        served = []
        for _ in range(count):
            app: FastAPI = create_app(config)
            served.append((stack.enter_context(running_app(app)), app.state.gateway))
        yield served


def _stream(url: str, tier: str = "STANDARD", **body: Any) -> int:
    with httpx.stream("POST", f"{url}/v1/completions", json={**BODY, **body}, headers={"x-semsched-tier": tier},
                      timeout=60) as answer:
        answer.read()
        return answer.status_code


def _burst(urls: list[str], count: int, tier: str = "STANDARD") -> list[int]:
    """``count`` concurrent streamed requests, spread over ``urls`` in turn; their statuses."""
    with ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(_stream, urls[i % len(urls)], tier) for i in range(count)]
        return [f.result() for f in futures]


def _shared(redis_url: str | None) -> dict[str, Any]:
    return {"redis_url": redis_url, **SYNC}


@pytest.mark.parametrize("mode", ["redis", "local"])
def test_two_replicas_keep_each_backends_cap_over_the_fleet(mode: str, redis: RedisServer) -> None:  # noqa: F811
    """The fleet's in-flight at each backend, counted there, stays within ``backends[].max_inflight`` with Redis;
    with each replica's own state it passes it (the check can fail)."""
    cap = 2
    backends = [fake_openai_app(first_token_delay_s=0.3, token_delay_s=0.01) for _ in range(2)]
    with running_app(backends[0]) as url0, running_app(backends[1]) as url1:
        config = config_for([url0, url1], backend={"max_inflight": cap},
                            shared_state=_shared(redis.url if mode == "redis" else None))
        with replicas(config) as served:
            statuses = _burst([url for url, _ in served], 16)
            assert statuses == [200] * 16
            peaks = [b.state.max_in_flight for b in backends]
            if mode == "redis":
                assert max(peaks) == cap  # full, never over
            else:
                assert max(peaks) > cap  # each replica filled each backend on its own
            for _, gateway in served:  # every lease released
                wait_for(lambda gateway=gateway: gateway.fleet.held() == 0)
    if mode == "redis":
        client = redis_client.Redis.from_url(redis.url)
        assert all(client.hlen(f"semsched:weight:backend:b{i}") == 0 for i in range(2))


@pytest.mark.parametrize("mode", ["redis", "local"])
def test_a_tiers_inflight_cap_holds_over_the_fleet_and_the_rest_waits(mode: str,
                                                                       redis: RedisServer) -> None:  # noqa: F811
    cap = 3
    backend = fake_openai_app(first_token_delay_s=0.3)
    with running_app(backend) as url:
        config = config_for([url], admission={"max_inflight": {"BACKGROUND": cap}},
                            shared_state=_shared(redis.url if mode == "redis" else None))
        with replicas(config) as served:
            assert _burst([u for u, _ in served], 12, tier="BACKGROUND") == [200] * 12
            if mode == "redis":
                assert backend.state.max_in_flight == cap
            else:
                assert backend.state.max_in_flight > cap
            for _, gateway in served:
                wait_for(lambda gateway=gateway: gateway.fleet.held() == 0)


def test_a_tier_over_its_cap_is_refused_after_queue_timeout_s() -> None:
    backend = fake_openai_app(first_token_delay_s=3)
    with running_app(backend) as url:
        config = config_for([url], admission={"max_inflight": {"BACKGROUND": 1}, "queue_timeout_s": 0.3})
        with replicas(config, count=1) as served, ThreadPoolExecutor(1) as pool:
            gateway_url, gateway = served[0]
            holding = pool.submit(_stream, gateway_url, "BACKGROUND")
            wait_for(lambda: backend.state.in_flight == 1)
            refused = httpx.post(f"{gateway_url}/v1/completions", json={**BODY, "stream": False},
                                 headers={"x-semsched-tier": "BACKGROUND"}, timeout=30)
            assert refused.status_code == 503
            assert "admission.max_inflight" in refused.json()["error"]["message"]
            assert metric(gateway_url, "semsched_gateway_rejections_total", tier="BACKGROUND",
                          reason="queue_timeout") == 1
            assert holding.result() == 200
            wait_for(lambda: gateway.fleet.held() == 0)


def test_every_lease_is_released_however_its_request_ends(redis: RedisServer) -> None:  # noqa: F811
    """Finished, timed out, broken, abandoned by its client while streaming or while waiting for a slot of its
    tier: no lease is left, in either replica or in Redis."""
    backend = fake_openai_app(first_token_delay_s=0.2, token_delay_s=0.05)
    with running_app(backend) as url, ThreadPoolExecutor(4) as pool:
        config = config_for([url], backend={"max_inflight": 4}, shared_state=_shared(redis.url),
                            admission={"max_inflight": {"STANDARD": 2}, "request_timeout_s": 1.5})
        with replicas(config) as served:
            (a, gateway_a), (b, gateway_b) = served
            assert _stream(a, max_tokens=3) == 200  # finished
            timed_out = pool.submit(_stream, b, max_tokens=100)  # 5 s of tokens: past request_timeout_s
            with httpx.stream("POST", f"{a}/v1/completions", json={**BODY, "max_tokens": 100},
                              timeout=30) as abandoned:  # the client leaves after the first token
                lines = abandoned.iter_lines()  # kept: a dropped iterator closes the response
                next(lines)
                wait_for(lambda: backend.state.in_flight == 2)
                with pytest.raises(httpx.ReadTimeout):  # both STANDARD slots are taken: it waits, then gives up
                    httpx.post(f"{b}/v1/completions", json={**BODY, "stream": False}, timeout=0.5)
            assert timed_out.result() == 200  # an error event ends it
            backend.state.fail_after_tokens = 1
            assert _stream(a, max_tokens=3) == 200  # broken after its first token: an error event
            client = redis_client.Redis.from_url(redis.url)
            for gateway in (gateway_a, gateway_b):
                wait_for(lambda gateway=gateway: gateway.fleet.held() == 0)
            wait_for(lambda: client.hlen("semsched:weight:tier:STANDARD") == 0)
            wait_for(lambda: client.hlen("semsched:weight:backend:b0") == 0)
            assert metric(a, "semsched_gateway_requests_total", outcome="cancelled") \
                + metric(b, "semsched_gateway_requests_total", outcome="cancelled") == 2
            assert metric(b, "semsched_gateway_requests_total", outcome="timeout") == 1


def test_routers_see_the_other_replicas_requests_on_each_backend(redis: RedisServer) -> None:  # noqa: F811
    """Without /metrics polling, replica B learns of A's request on b0 only through the shared load books."""
    backend = fake_openai_app(first_token_delay_s=0.1, token_delay_s=0.05)
    with running_app(backend) as url, ThreadPoolExecutor(1) as pool:
        config = config_for([url], shared_state=_shared(redis.url), routing={"poll_metrics": False})
        with replicas(config) as served:
            (a, _), (_, gateway_b) = served
            view = gateway_b.pool.views()[0]
            assert view.num_unfinished == 0
            running = pool.submit(_stream, a, max_tokens=60)
            wait_for(lambda: view.num_unfinished == 1)
            assert gateway_b.pool.backends[0].remote_load == 1
            assert running.result() == 200
            wait_for(lambda: view.num_unfinished == 0)


def _tier_table(tmp_path: Path) -> str:
    table = tmp_path / "tiers.yaml"
    table.write_text("tiers:\n  - {name: PREMIUM, priority: 1, ttft_slo_ms: 500}\n"
                     "  - {name: BACKGROUND, priority: 3, e2e_slo_ms: 600000}\n")
    return str(table)


@pytest.mark.parametrize("mode", ["redis", "local"])
def test_shedding_starts_on_every_replica_when_premium_misses_on_one(mode: str, tmp_path: Path,
                                                                     redis: RedisServer) -> None:  # noqa: F811
    """Replica A sees PREMIUM meet its TTFT target alone and miss it under load (as in test_gateway's shedding
    test); replica B, which served nothing, sheds BACKGROUND too with Redis, on A's observations; alone it
    cannot."""
    backend = fake_openai_app(token_delay_s=0.02)
    guard = {"min_samples": 3, "hold_s": 0, "evaluate_every_s": 0.1, "window_s": 30}
    with running_app(backend) as url, ThreadPoolExecutor(4) as pool:
        config = config_for([url], tier_table=_tier_table(tmp_path), default_tier="BACKGROUND",
                            admission={"guard": guard},
                            shared_state=_shared(redis.url if mode == "redis" else None))
        with replicas(config) as served:
            (a_url, _), (b_url, _) = served
            for _ in range(3):  # alone on the server: fast, the target is feasible
                assert _stream(a_url, "PREMIUM", max_tokens=2) == 200
            backend.state.first_token_delay_s = 1.0  # the server is loaded: slow first tokens
            busy = [pool.submit(_stream, a_url, "BACKGROUND", max_tokens=200) for _ in range(2)]
            wait_for(lambda: backend.state.in_flight == 2)
            for _ in range(2):  # too few after the shedding to judge it futile (min_samples)
                assert _stream(a_url, "PREMIUM", max_tokens=2) == 200
            wait_for(lambda: metric(a_url, "semsched_gateway_shed_level") == 1)
            if mode == "redis":
                wait_for(lambda: metric(b_url, "semsched_gateway_shed_level") == 1)
                shed = httpx.post(f"{b_url}/v1/completions", json={**BODY, "stream": False},
                                  headers={"x-semsched-tier": "BACKGROUND"}, timeout=30)
                assert shed.status_code == 429 and shed.json()["error"]["message"].startswith("shed:")
            else:
                assert metric(b_url, "semsched_gateway_shed_level") == 0
                assert _stream(b_url, "BACKGROUND", max_tokens=1) == 200  # B has seen no PREMIUM request
            assert [f.result() for f in busy] == [200, 200]


def test_replicas_keep_serving_without_redis_say_so_and_rejoin_when_it_returns(
        redis: RedisServer) -> None:  # noqa: F811
    backend = fake_openai_app(token_delay_s=0.01)
    with running_app(backend) as url, ThreadPoolExecutor(2) as pool:
        config = config_for([url], backend={"max_inflight": 8}, shared_state=_shared(redis.url))
        with replicas(config) as served:
            urls = [u for u, _ in served]
            assert _burst(urls, 4) == [200] * 4
            for u in urls:
                assert httpx.get(f"{u}/health").json()["shared_state"]["connected"] is True
                assert metric(u, "semsched_gateway_shared_state_up") == 1
            long = pool.submit(_stream, urls[0], "STANDARD", max_tokens=400)  # in flight through the outage
            wait_for(lambda: backend.state.in_flight == 1)
            redis.stop()
            assert _burst(urls, 4) == [200] * 4  # no request fails because Redis went away
            for u in urls:
                wait_for(lambda u=u: httpx.get(f"{u}/health").json()["shared_state"]["connected"] is False)
                health = httpx.get(f"{u}/health").json()
                assert health["status"] == "ok" and health["shared_state"]["mode"] == "redis"
                assert health["shared_state"]["error"]
                assert metric(u, "semsched_gateway_shared_state_up") == 0
                assert metric(u, "semsched_gateway_shared_state_fallbacks_total") >= 1
            redis.start()  # the same port, empty
            for u in urls:
                wait_for(lambda u=u: metric(u, "semsched_gateway_shared_state_up") == 1)
                assert httpx.get(f"{u}/health").json()["shared_state"]["connected"] is True
            client = redis_client.Redis.from_url(redis.url)
            assert client.hlen("semsched:weight:backend:b0") == 1  # the long request's lease, registered again
            assert _burst(urls, 4) == [200] * 4
            assert long.result() == 200
            wait_for(lambda: client.hlen("semsched:weight:backend:b0") == 0)


# ---- the primitives -----------------------------------------------------------------------------------------
def _config(url: str | None, **settings: Any) -> SharedStateConfig:
    return SharedStateConfig(redis_url=url, **settings)


@pytest.mark.parametrize("mode", ["redis", "local"])
def test_leases_hold_a_limit_and_counters_refuse_past_theirs(mode: str, redis: RedisServer) -> None:  # noqa: F811
    async def scenario() -> None:
        shared = make_shared_state(_config(redis.url if mode == "redis" else None))
        await shared.start()
        try:
            assert (await shared.take("k", "a", 2, 3)).ok
            refused = await shared.take("k", "b", 2, 3)
            assert not refused.ok and refused.total == 2
            assert (await shared.take("k", "c", 1, 3)).ok
            assert await shared.loads(["k", "other"]) == {"k": (3, 2), "other": (0, 0)}
            await shared.release("k", "a")
            assert (await shared.take("k", "b", 2, 3)).ok
            assert (await shared.take("heavy", "h", 5, 3)).ok  # heavier than the limit: taken when empty
            charges = [Charge("r", 1, 2), Charge("t", 10, 15)]
            assert (await shared.check_and_charge(charges, 60)).ok
            verdict = await shared.check_and_charge(charges, 60)  # 10 + 10 would pass 15
            assert not verdict.ok and verdict.refused == 1 and verdict.used == 10
            assert 0 < verdict.retry_after_s <= 60
            await shared.charge("t", 100, 60)
            assert (await shared.check_and_charge([Charge("t", 0, 15)], 60)).refused == 0  # spent
        finally:
            await shared.stop()

    asyncio.run(scenario())


def test_a_dead_replicas_leases_expire_and_another_replicas_items_arrive(redis: RedisServer) -> None:  # noqa: F811
    async def scenario() -> None:
        dead = make_shared_state(_config(redis.url, lease_ttl_s=0.5))
        alive = make_shared_state(_config(redis.url))
        await dead.start()
        await alive.start()
        try:
            got: list[dict[str, Any]] = []
            alive.subscribe("news", got.append)
            dead.subscribe("news", got.append)
            await alive.sync()
            await dead.sync()
            dead.publish("news", {"n": 1})
            await dead.sync()  # pushed (and its own item is not delivered to itself)
            await alive.sync()
            assert got == [{"n": 1}]
            assert (await dead.take("k", "d", 1, 1)).ok  # then it never renews: it died
            assert not (await alive.take("k", "a", 1, 1)).ok
            deadline = asyncio.get_running_loop().time() + 10
            while not (await alive.take("k", "a", 1, 1)).ok:
                assert asyncio.get_running_loop().time() < deadline, "the dead replica's lease never expired"
                await asyncio.sleep(0.05)
        finally:
            await alive.stop()
            await dead.stop()

    asyncio.run(scenario())


def test_an_unreachable_redis_falls_back_to_local_state_at_once() -> None:
    async def scenario() -> None:
        from tests.gateway.redis_server import free_port

        shared = make_shared_state(_config(f"redis://127.0.0.1:{free_port()}/0", connect_timeout_s=0.2))
        await shared.start()
        try:
            assert shared.status()["connected"] is False and shared.status()["error"]
            assert (await shared.take("k", "a", 1, 1)).ok  # counted here, against the same limit
            assert not (await shared.take("k", "b", 1, 1)).ok
        finally:
            await shared.stop()

    asyncio.run(scenario())


def test_check_shows_the_redis_password_redacted() -> None:
    from semsched.gateway.config import parse_config, redact_key, shown_settings

    config = parse_config({"backends": [{"name": "b0", "url": "http://127.0.0.1:9"}],
                           "shared_state": {"redis_url": "redis://:s3cret-pass@10.0.0.7:6379/2"}})
    shown = shown_settings(config)["shared_state"]["redis_url"]
    assert "s3cret-pass" not in shown
    assert shown == f"redis://:{redact_key('s3cret-pass')}@10.0.0.7:6379/2"


@pytest.mark.parametrize("mode", ["redis", "local"])
def test_a_conversation_follows_its_prefix_to_the_same_backend_through_either_replica(
        mode: str, redis: RedisServer) -> None:  # noqa: F811
    """Turn 1 reaches replica A while b0 is busy, so it goes to b1; turn 2 reaches replica B with both backends
    idle. With Redis, B knows A's prefix entries and sends turn 2 to b1; on its own state B has never seen the
    prefix and least-outstanding's tie goes to b0."""
    conversation = "A conversation that both replicas see: " + "its long shared beginning " * 12
    backends = [fake_openai_app(token_delay_s=0.05), fake_openai_app(token_delay_s=0.05)]
    with running_app(backends[0]) as url0, running_app(backends[1]) as url1, ThreadPoolExecutor(1) as pool:
        config = config_for([url0, url1], shared_state=_shared(redis.url if mode == "redis" else None),
                            routing={"router": "prefix-affinity", "poll_metrics": False})
        with replicas(config) as served:
            (a, _), (b, gateway_b) = served

            def post(url: str, prompt: str, max_tokens: int) -> int:
                body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens}
                return httpx.post(f"{url}/v1/completions", json=body, timeout=30).status_code

            busy = pool.submit(post, a, "Another conversation, long enough to be hashed " * 4, 40)
            wait_for(lambda: backends[0].state.in_flight == 1)
            assert post(a, conversation + "first question", 1) == 200
            assert [c["prompt"] for c in backends[1].state.calls] == [conversation + "first question"]
            assert busy.result() == 200
            table = gateway_b.dispatcher.router.table
            if mode == "redis":
                wait_for(lambda: len(table) > 0)  # A's entries reached B (every sync_interval_s)
            assert post(b, conversation + "first question, its answer and a second question", 1) == 200
            served_by = 1 if mode == "redis" else 0
            turns = [c for c in backends[served_by].state.calls if c["prompt"].startswith(conversation)]
            assert len(turns) == (2 if mode == "redis" else 1)
