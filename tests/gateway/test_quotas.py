"""Per-tenant quotas (semsched/gateway/quotas.py): requests and tokens per minute, per-tier defaults and per-key
overrides, output tokens charged as they stream; in one replica and over two sharing a redis-server."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import httpx
import pytest

from semsched.gateway.app import create_app
from semsched.gateway.config import GatewayConfigError, parse_config, redact_key
from tests.fake_openai import fake_openai_app, running_app
from tests.gateway.conftest import config_for, metric, serving, wait_for
from tests.gateway.redis_server import RedisServer, redis  # noqa: F401  (the fixture)

BODY = {"model": "tiny", "prompt": "hello there", "max_tokens": 2}
SYNC = {"sync_interval_s": 0.05, "op_timeout_s": 5.0}  # see tests/gateway/test_shared_state.py


def _post(url: str, tenant: str | None = None, key: str | None = None, **body: Any) -> httpx.Response:
    headers = {"x-semsched-tenant": tenant} if tenant else {}
    if key:
        headers["authorization"] = f"Bearer {key}"
    return httpx.post(f"{url}/v1/completions", json={**BODY, **body}, headers=headers, timeout=30)


def _shared(mode: str, redis: RedisServer) -> dict[str, Any]:  # noqa: F811
    return {"redis_url": redis.url if mode == "redis" else None, **SYNC}


@pytest.mark.parametrize("mode", ["local", "redis"])
def test_requests_per_minute_refuses_with_retry_after_and_the_quota_reason(mode: str,
                                                                           redis: RedisServer) -> None:  # noqa: F811
    backend = fake_openai_app()
    with running_app(backend) as url:
        config = config_for([url], quotas={"tiers": {"STANDARD": {"requests_per_minute": 2}}},
                            shared_state=_shared(mode, redis))
        with serving(config) as gateway:
            assert [_post(gateway, "acme").status_code for _ in range(2)] == [200, 200]
            refused = _post(gateway, "acme")
            assert refused.status_code == 429
            assert 1 <= int(refused.headers["retry-after"]) <= 60
            error = refused.json()["error"]
            assert error["param"] == "quota" and error["type"] == "rate_limit_error"
            assert "'acme' used 2 of its 2 requests per minute" in error["message"]
            assert "quotas.tiers.STANDARD.requests_per_minute" in error["message"]
            assert metric(gateway, "semsched_gateway_rejections_total", tier="STANDARD", reason="quota") == 1
            assert _post(gateway, "other").status_code == 200  # a tenant of its own
            assert _post(gateway).status_code == 200  # no tenant: no quota
            assert len(backend.state.calls) == 4  # the refused request never reached the backend


@pytest.mark.parametrize("mode", ["local", "redis"])
def test_tokens_per_minute_counts_prompt_and_output_and_a_keys_quota_wins_over_its_tiers(
        mode: str, redis: RedisServer) -> None:  # noqa: F811
    backend = fake_openai_app()
    keys = {"k-acme": {"tier": "STANDARD", "tenant": "acme", "quota": {"tokens_per_minute": 30}},
            "k-solo": {"tier": "STANDARD"}}
    with running_app(backend) as url:
        config = config_for([url], api_keys=keys, quotas={"tiers": {"STANDARD": {"tokens_per_minute": 1000}}},
                            shared_state=_shared(mode, redis))
        with serving(config) as gateway:
            first = _post(gateway, key="k-acme", max_tokens=40)  # the window's first charge always passes
            assert first.status_code == 200
            refused = _post(gateway, key="k-acme")
            assert refused.status_code == 429
            message = refused.json()["error"]["message"]
            assert f"api_keys.{redact_key('k-acme')}.quota.tokens_per_minute" in message
            assert "of its 30 tokens per minute" in message
            used = int(message.split("used ")[1].split(" ")[0])
            assert used > 40  # its 40 output tokens charged at the end, its prompt at admission
            # a key without a tenant is its own tenant, with its tier's quota
            assert _post(gateway, key="k-solo", max_tokens=40).status_code == 200
            assert _post(gateway, key="k-solo").status_code == 200


def test_output_tokens_are_charged_while_they_stream() -> None:
    """The second request is refused while the first, which alone passes the limit, is still streaming."""
    backend = fake_openai_app(token_delay_s=0.05)  # 400 tokens: 20 s, far longer than the test waits
    with running_app(backend) as url:
        config = config_for([url], quotas={"tiers": {"STANDARD": {"tokens_per_minute": 50}}}, shared_state=SYNC)
        with serving(config) as gateway:
            long = {**BODY, "max_tokens": 400, "stream": True}
            with httpx.stream("POST", f"{gateway}/v1/completions", json=long,
                              headers={"x-semsched-tenant": "acme"}, timeout=60) as streaming:
                lines = streaming.iter_lines()
                tokens = 0
                while tokens < 60:
                    tokens += '"text"' in next(lines)
                wait_for(lambda: _post(gateway, "acme", max_tokens=1).status_code == 429)
                assert backend.state.in_flight >= 1  # the first stream has not ended
            refused = _post(gateway, "acme", max_tokens=1)
            assert refused.status_code == 429 and "tokens per minute" in refused.json()["error"]["message"]


def test_two_replicas_share_a_tenants_quota(redis: RedisServer) -> None:  # noqa: F811
    backend = fake_openai_app()
    with running_app(backend) as url:
        config = config_for([url], quotas={"tiers": {"STANDARD": {"requests_per_minute": 3}}},
                            shared_state={"redis_url": redis.url, **SYNC})
        with ExitStack() as stack:
            a, b = (stack.enter_context(running_app(create_app(config))) for _ in range(2))
            assert [_post(a, "acme").status_code, _post(b, "acme").status_code, _post(a, "acme").status_code] \
                == [200, 200, 200]
            assert _post(b, "acme").status_code == 429  # its fourth over the fleet
            assert _post(a, "acme").status_code == 429


def test_quota_config_errors_name_the_field_and_the_limit() -> None:
    backends = [{"name": "b0", "url": "http://127.0.0.1:9"}]
    with pytest.raises(GatewayConfigError, match=r"quotas\.tiers\.GOLD: unknown tier 'GOLD'"):
        parse_config({"backends": backends, "quotas": {"tiers": {"GOLD": {"requests_per_minute": 1}}}})
    with pytest.raises(GatewayConfigError, match=r"quotas\.tiers\.STANDARD\.tokens_per_minute: .*greater than or "
                                                 r"equal to 1"):
        parse_config({"backends": backends, "quotas": {"tiers": {"STANDARD": {"tokens_per_minute": 0}}}})
    with pytest.raises(GatewayConfigError, match=r"api_keys\.k\.quota\.requests_per_mnute"):
        parse_config({"backends": backends, "api_keys": {"k": {"tier": "STANDARD",
                                                               "quota": {"requests_per_mnute": 1}}}})
    with pytest.raises(GatewayConfigError, match=r"admission\.max_inflight\.PREMIUM: must be from 1 to 1000000 "
                                                 r"\(got 0\)"):
        parse_config({"backends": backends, "admission": {"max_inflight": {"PREMIUM": 0}}})
    with pytest.raises(GatewayConfigError, match=r"shared_state\.redis_url: must be a redis://"):
        parse_config({"backends": backends, "shared_state": {"redis_url": "http://x"}})
