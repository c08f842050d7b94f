"""Gateways in front of fake OpenAI servers (tests/fake_openai.py), each served on a free local port."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from semsched.gateway.app import create_app
from semsched.gateway.config import GatewayConfig, parse_config
from tests.fake_openai import running_app

FAST_HEALTH = {"health_interval_s": 0.1, "health_timeout_s": 0.5, "unhealthy_after": 1,
               "metrics_interval_s": 0.1}


def config_for(urls: list[str], **settings: Any) -> GatewayConfig:
    """A gateway config for backends at ``urls`` (named b0, b1, ...); ``settings`` are top-level sections,
    ``backend`` settings go to every backend; health checks are fast."""
    backend = settings.pop("backend", {})
    routing = {**FAST_HEALTH, **settings.pop("routing", {})}
    document = {"backends": [{"name": f"b{i}", "url": url, **backend} for i, url in enumerate(urls)],
                "routing": routing, **settings}
    return parse_config(document)


@contextmanager
def serving(config: GatewayConfig) -> Iterator[str]:
    """The gateway's base URL while it runs."""
    with running_app(create_app(config)) as url:
        yield url


def metric(url: str, name: str, **labels: str) -> float:
    """The value of one sample of the gateway's ``/metrics`` (0 when absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics").text
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def wait_for(predicate: Any, timeout_s: float = 10.0) -> None:
    """Poll ``predicate`` until true; fails the test after ``timeout_s`` (a hang is a failure, not a pass)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached in {timeout_s} s")
        time.sleep(0.02)
