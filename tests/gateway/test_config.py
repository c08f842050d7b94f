"""The gateway's configuration: every bad field is an error naming it; the CLI checks a file before serving."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from semsched.cli import main
from semsched.core.request import LengthDistribution
from semsched.gateway.admission import guard_config
from semsched.gateway.classify import compress
from semsched.gateway.config import GatewayConfigError, load_config, parse_config

BACKEND = {"name": "a", "url": "http://127.0.0.1:8000"}


@pytest.mark.parametrize(("document", "field"), [
    ({}, "backends"),
    ({"backends": []}, "backends"),
    ({"backends": [{"name": "a", "url": "ftp://x"}]}, "backends[0].url"),
    ({"backends": [BACKEND, BACKEND]}, "backends: names must be unique"),
    ({"backends": [{**BACKEND, "max_inflight": 0}]}, "backends[0].max_inflight"),
    ({"backends": [BACKEND], "port": 70000}, "port"),
    ({"backends": [BACKEND], "routing": {"unhealthy_after": 0}}, "routing.unhealthy_after"),
    ({"backends": [BACKEND], "admission": {"queue_timeout_s": -1}}, "admission.queue_timeout_s"),
    ({"backends": [BACKEND], "admission": {"max_queued": {"GOLD": 3}}}, "admission.max_queued.GOLD"),
    ({"backends": [BACKEND], "admission": {"max_queued": {"PREMIUM": -1}}}, "admission.max_queued.PREMIUM"),
    ({"backends": [BACKEND], "default_tier": "GOLD"}, "default_tier"),
    ({"backends": [BACKEND], "api_keys": {"k1": {"tier": "GOLD"}}}, "api_keys.k1.tier"),
    ({"backends": [BACKEND], "classifier": {"urgency": "magic"}}, "classifier.urgency"),
    ({"backends": [BACKEND], "unknown": 1}, "unknown"),
    ([1, 2], "must be a mapping"),
])
def test_bad_settings_name_their_field(document: Any, field: str) -> None:
    with pytest.raises(GatewayConfigError, match=r".*" + field.replace("[", r"\[").replace("]", r"\]")):
        parse_config(document)


def test_guard_settings_are_checked_by_name_and_value() -> None:
    config = parse_config({"backends": [BACKEND], "admission": {"guard": {"windw_s": 3}}})
    with pytest.raises(GatewayConfigError, match="admission.guard.windw_s: unknown setting"):
        guard_config(config.admission)
    config = parse_config({"backends": [BACKEND], "admission": {"guard": {"window_s": -3}}})
    with pytest.raises(GatewayConfigError, match="admission.guard: window_s"):
        guard_config(config.admission)
    config = parse_config({"backends": [BACKEND], "admission": {"guard": {"max_waiting": [4, 2]}}})
    assert guard_config(config.admission).max_waiting == (4, 2)


def test_url_is_normalised_and_a_tier_table_is_used(tmp_path: Path) -> None:
    table = tmp_path / "tiers.yaml"
    table.write_text("tiers:\n  - {name: GOLD, priority: 0, ttft_slo_ms: 100}\n  - {name: TIN, priority: 5}\n")
    config = parse_config({"backends": [{"name": "a", "url": "http://h:1/v1/"}], "tier_table": str(table),
                           "default_tier": "tin", "api_keys": {"k": {"tier": "GOLD"}}})
    assert config.backends[0].url == "http://h:1"
    assert [t.name for t in config.tiers()] == ["GOLD", "TIN"]


def test_compress_keeps_at_most_64_points_and_never_shortens() -> None:
    lengths = tuple(range(1, 501))
    wide = LengthDistribution(lengths, tuple([1 / 500] * 500))
    small = compress(wide)
    assert len(small.lengths) <= 64 and abs(sum(small.probs) - 1) < 1e-9
    assert small.lengths[-1] == 500
    assert small.mean >= wide.mean  # mass only moves to longer lengths
    assert compress(LengthDistribution.point(7)) == LengthDistribution.point(7)


def test_cli_check_reads_the_file_and_bad_files_are_one_error_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "gateway.yaml"
    good.write_text("backends:\n  - {name: a, url: 'http://127.0.0.1:8000'}\nrouting: {router: go-routing}\n")
    assert main(["gateway", "--config", str(good), "--check"]) == 0
    assert "go-routing" in capsys.readouterr().out
    assert load_config(good).routing.router == "go-routing"
    bad = tmp_path / "bad.yaml"
    bad.write_text("backends:\n  - {name: a, url: 'http://127.0.0.1:8000'}\nrouting: {router: teleport}\n")
    assert main(["gateway", "--config", str(bad), "--check"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "teleport" in err
    assert main(["gateway", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "--config" in capsys.readouterr().err


EXAMPLE = Path(__file__).parents[2] / "examples" / "gateway.yaml"


def test_the_shipped_example_loads_and_passes_check(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 28: the README's `semsched gateway --config gateway.yaml` named a file the repository did not have."""
    config = load_config(EXAMPLE)
    assert [b.url for b in config.backends] == ["http://127.0.0.1:8000", "http://127.0.0.1:8001"]
    assert main(["gateway", "--config", str(EXAMPLE), "--check"]) == 0
    assert "least-outstanding" in capsys.readouterr().out
    readme = (EXAMPLE.parents[1] / "README.md").read_text()
    assert "semsched gateway --config examples/gateway.yaml" in readme


def test_a_routing_profile_that_does_not_load_fails_check_under_any_router(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("backends:\n  - {name: a, url: 'http://127.0.0.1:8000'}\nrouting: {profile: nosuch}\n")
    assert main(["gateway", "--config", str(path), "--check"]) == 2  # the default router needs no profile
    err = capsys.readouterr().err
    assert err.startswith("error:") and "routing.profile" in err and "nosuch" in err


@pytest.mark.parametrize(("setting", "field"), [
    ("admission: {queue_timeout_s: .nan}", "admission.queue_timeout_s"),
    ("routing: {health_interval_s: .inf}", "routing.health_interval_s"),
    ("classifier: {max_wait_ms: -.inf}", "classifier.max_wait_ms"),
])
def test_a_number_that_is_not_finite_names_its_field(tmp_path: Path, setting: str, field: str) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(f"backends:\n  - {{name: a, url: 'http://127.0.0.1:8000'}}\n{setting}\n")
    with pytest.raises(GatewayConfigError, match=f"{field}: Input should be a finite number"):
        load_config(path)


def test_check_shows_distinct_keys_distinctly_without_showing_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keys = ["sk-ops-7f3a", "sk-acme-prod-91c2", "sk-free-5d0e", "sk-batch-e44b"]
    path = tmp_path / "gateway.yaml"
    path.write_text("backends:\n  - {name: a, url: 'http://127.0.0.1:8000', api_key: sk-backend-secret}\n"
                    "api_keys:\n" + "".join(f"  {key}: {{tier: PREMIUM}}\n" for key in keys))
    assert main(["gateway", "--config", str(path), "--check"]) == 0
    out = capsys.readouterr().out
    shown = json.loads(out)
    assert len(shown["api_keys"]) == 4  # four keys, four entries (cut to 3 characters they were one)
    for key in [*keys, "sk-backend-secret"]:
        assert key not in out and key[3:] not in out
    assert shown["backends"][0]["api_key"].startswith("sk-...#")
