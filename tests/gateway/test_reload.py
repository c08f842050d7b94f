"""Hot reload (issue 32): backends added, drained and replaced with requests in flight, none dropped; a bad file
refused and the old configuration kept; keys swapped; POST /admin/reload's key; SIGHUP through the command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from semsched.gateway.app import create_app
from semsched.gateway.config import load_config
from semsched.gateway.service import Gateway
from tests.fake_openai import fake_openai_app, running_app
from tests.gateway.conftest import FAST_HEALTH, metric, wait_for

ADMIN_ENV = "SEMSCHED_TEST_ADMIN_KEY"
ADMIN = "admin-0123456789"
BODY = {"model": "tiny", "prompt": "hello there", "max_tokens": 20, "stream": True}
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _admin_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ADMIN_ENV, ADMIN)


def _write(path: Path, backends: dict[str, str], **settings: Any) -> None:
    document = {"backends": [{"name": name, "url": url} for name, url in backends.items()],
                "routing": FAST_HEALTH, "admin_key_env": ADMIN_ENV, **settings}
    path.write_text(yaml.safe_dump(document))


@contextmanager
def _reloadable(path: Path) -> Iterator[tuple[str, Gateway]]:
    config = load_config(path)
    gateway = Gateway(config, config_path=path)
    with running_app(create_app(config, gateway)) as url:
        yield url, gateway


def _reload(url: str, key: str | None = ADMIN) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key is not None else {}
    return httpx.post(f"{url}/admin/reload", headers=headers, timeout=10)


def _stream(url: str, results: list[tuple[int, list[str]]]) -> None:
    with httpx.stream("POST", f"{url}/v1/completions", json=BODY, timeout=60) as answer:
        results.append((answer.status_code, [line for line in answer.iter_lines() if line.strip()]))


def _whole(events: list[str]) -> bool:
    """A stream that ended well: every token, [DONE], no error event."""
    return events[-1] == "data: [DONE]" and not any('"error"' in e for e in events) and sum(
        '"text": " tok"' in e for e in events) == BODY["max_tokens"]


def test_a_removed_backend_drains_its_requests_in_flight_and_a_new_one_serves(tmp_path: Path) -> None:
    slow, fast, new = fake_openai_app(token_delay_s=0.5), fake_openai_app(), fake_openai_app()
    path = tmp_path / "gateway.yaml"
    with running_app(slow) as slow_url, running_app(fast) as fast_url, running_app(new) as new_url:
        rotating = {**FAST_HEALTH, "router": "round-robin"}
        _write(path, {"b0": slow_url, "b1": fast_url}, routing=rotating)
        with _reloadable(path) as (gateway, service):
            results: list[tuple[int, list[str]]] = []
            threads = [threading.Thread(target=_stream, args=(gateway, results)) for _ in range(6)]
            for thread in threads:
                thread.start()
            wait_for(lambda: slow.state.in_flight >= 1)  # streams under way on the backend about to go
            before = httpx.get(f"{gateway}/health").json()["config"]["version"]
            _write(path, {"b1": fast_url, "b2": new_url}, routing=rotating)
            answer = _reload(gateway)
            assert answer.status_code == 200, answer.text
            done = answer.json()
            assert (done["outcome"], done["drained"], done["added"], done["replaced"]) == (
                "applied", ["b0"], ["b2"], [])
            health = httpx.get(f"{gateway}/health").json()
            assert set(health["backends"]) == {"b1", "b2"}
            assert health["config"]["version"] == done["version"] != before
            assert [d["name"] for d in health["draining"]] == ["b0"]
            assert health["draining"][0]["inflight"] >= 1
            calls = len(slow.state.calls)
            for _ in range(6):  # new requests: never to the draining backend
                assert httpx.post(f"{gateway}/v1/completions", json={**BODY, "stream": False}).status_code == 200
            assert len(slow.state.calls) == calls
            assert len(new.state.calls) >= 1  # (round-robin: its turn comes)
            slow.state.token_delay_s = 0.0  # let the drained streams end
            for thread in threads:
                thread.join(timeout=30)
            assert len(results) == 6
            assert all(status == 200 and _whole(events) for status, events in results)
            wait_for(lambda: httpx.get(f"{gateway}/health").json()["draining"] == [])
            old = service.pool.backends[0]
            assert old.name == "b0" and old.retired and not old.inflight
            assert metric(gateway, "semsched_gateway_reloads_total", outcome="applied") == 1
            assert metric(gateway, "semsched_gateway_requests_total", outcome="error") == 0


def test_a_backend_whose_url_changes_is_replaced(tmp_path: Path) -> None:
    old, new = fake_openai_app(token_delay_s=0.5), fake_openai_app()
    path = tmp_path / "gateway.yaml"
    with running_app(old) as old_url, running_app(new) as new_url:
        _write(path, {"b0": old_url})
        with _reloadable(path) as (gateway, service):
            results: list[tuple[int, list[str]]] = []
            thread = threading.Thread(target=_stream, args=(gateway, results))
            thread.start()
            wait_for(lambda: old.state.in_flight == 1)
            _write(path, {"b0": new_url})
            done = _reload(gateway).json()
            assert (done["outcome"], done["replaced"], done["added"], done["drained"]) == (
                "applied", ["b0"], [], [])
            assert httpx.post(f"{gateway}/v1/completions", json={**BODY, "stream": False}).status_code == 200
            assert len(new.state.calls) == 1 and len(old.state.calls) == 1
            assert [b.index for b in service.pool.backends] == [0, 1]  # a new index; the old one is kept
            old.state.token_delay_s = 0.0
            thread.join(timeout=30)
            assert results[0][0] == 200 and _whole(results[0][1])
            wait_for(lambda: service.pool.backends[0].retired)


def test_a_bad_file_is_refused_and_the_configuration_in_force_stays(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    backend = fake_openai_app()
    path = tmp_path / "gateway.yaml"
    with running_app(backend) as url:
        _write(path, {"b0": url})
        with _reloadable(path) as (gateway, service):
            version = httpx.get(f"{gateway}/health").json()["config"]["version"]
            config = service.config
            bad_files = [
                ("backends:\n  - {name: b0, url: 'ftp://nowhere'}\n", "backends[0].url"),
                ("backends: [\n", "not valid YAML"),
                (f"backends:\n  - {{name: b0, url: '{url}'}}\napi_keys:\n"
                 f"  team: {{tier: PREMIUM, key_env: SEMSCHED_TEST_UNSET_VARIABLE}}\n", "api_keys.team.key_env"),
            ]
            for text, named in bad_files:
                path.write_text(text)
                with caplog.at_level("ERROR", logger="semsched.gateway"):
                    answer = _reload(gateway)
                assert answer.status_code == 400
                assert answer.json()["outcome"] == "refused" and named in answer.json()["error"]
                assert named in caplog.text
                assert service.config is config
                assert httpx.get(f"{gateway}/health").json()["config"]["version"] == version
                assert httpx.post(f"{gateway}/v1/completions", json={**BODY, "stream": False}).status_code == 200
            assert metric(gateway, "semsched_gateway_reloads_total", outcome="refused") == len(bad_files)
            assert metric(gateway, "semsched_gateway_reloads_total", outcome="applied") == 0


def test_admin_reload_needs_the_admin_key_and_is_off_without_one(tmp_path: Path) -> None:
    backend = fake_openai_app()
    path = tmp_path / "gateway.yaml"
    with running_app(backend) as url:
        _write(path, {"b0": url})
        with _reloadable(path) as (gateway, _):
            assert _reload(gateway, key=None).status_code == 401
            answer = _reload(gateway, key="not-the-key")
            assert answer.status_code == 403 and "admin key" in answer.json()["error"]["message"]
            assert _reload(gateway).json()["outcome"] == "unchanged"
            path.write_text(yaml.safe_dump({"backends": [{"name": "b0", "url": url}], "routing": FAST_HEALTH}))
            assert _reload(gateway).json()["outcome"] == "applied"  # the key itself is reloaded: now none
            answer = _reload(gateway)
            assert answer.status_code == 404 and "admin_key_env" in answer.json()["error"]["message"]
    path.write_text(yaml.safe_dump({"backends": [{"name": "b0", "url": "http://127.0.0.1:9"}]}))
    with _reloadable(path) as (gateway, _):
        assert _reload(gateway).status_code == 404


def test_keys_are_swapped_and_a_restart_only_setting_is_reported_not_applied(tmp_path: Path) -> None:
    backend = fake_openai_app()
    path = tmp_path / "gateway.yaml"
    keys_file = tmp_path / "keys.yaml"
    keys_file.write_text(yaml.safe_dump({"sk-old-client": {"tier": "PREMIUM", "tenant": "a"}}))
    with running_app(backend) as url:
        _write(path, {"b0": url}, require_api_key=True, keys_file=str(keys_file), port=8080)
        with _reloadable(path) as (gateway, service):
            def status(key: str) -> int:
                return httpx.post(f"{gateway}/v1/completions", json={**BODY, "stream": False},
                                  headers={"authorization": f"Bearer {key}"}).status_code

            assert (status("sk-old-client"), status("sk-new-client")) == (200, 401)
            keys_file.write_text(yaml.safe_dump({"sk-new-client": {"tier": "PREMIUM", "tenant": "a"}}))
            _write(path, {"b0": url}, require_api_key=True, keys_file=str(keys_file), port=9999)
            done = _reload(gateway).json()
            assert done["outcome"] == "applied" and done["restart_required"] == ["port"]
            assert (status("sk-old-client"), status("sk-new-client")) == (401, 200)
            assert service.config.port == 8080  # kept until a restart
            assert httpx.get(f"{gateway}/health").json()["config"]["restart_required"] == ["port"]


def test_sighup_reloads_the_command_s_file(tmp_path: Path) -> None:
    first, second = fake_openai_app(), fake_openai_app()
    path = tmp_path / "gateway.yaml"
    with running_app(first) as first_url, running_app(second) as second_url:
        _write(path, {"b0": first_url})
        port = _free_port()
        command = [sys.executable, "-c", "import sys; from semsched.cli import main; sys.exit(main())",
                   "gateway", "--config", str(path), "--port", str(port), "--log-level", "warning"]
        process = subprocess.Popen(command, cwd=REPO, env={**os.environ}, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        gateway = f"http://127.0.0.1:{port}"
        try:
            wait_for(lambda: _health(gateway) is not None, timeout_s=60)
            assert set(_health(gateway)["backends"]) == {"b0"}  # type: ignore[index]
            _write(path, {"b1": second_url})
            process.send_signal(signal.SIGHUP)
            wait_for(lambda: set((_health(gateway) or {}).get("backends", ())) == {"b1"}, timeout_s=20)
            assert httpx.post(f"{gateway}/v1/completions", json={**BODY, "stream": False}).status_code == 200
            assert len(second.state.calls) == 1 and not first.state.calls
            assert metric(gateway, "semsched_gateway_reloads_total", outcome="applied") == 1
            assert process.poll() is None  # SIGHUP did not end it
        finally:
            process.terminate()
            output, _ = process.communicate(timeout=30)
        assert "configuration reloaded" in output


def _health(url: str) -> dict[str, Any] | None:
    try:
        return dict(httpx.get(f"{url}/health", timeout=2).json())
    except httpx.HTTPError:
        return None


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_request_waiting_for_a_slot_goes_to_a_backend_a_reload_adds(tmp_path: Path) -> None:
    busy, added = fake_openai_app(token_delay_s=0.5), fake_openai_app()
    path = tmp_path / "gateway.yaml"
    with running_app(busy) as busy_url, running_app(added) as added_url:
        path.write_text(yaml.safe_dump({"backends": [{"name": "b0", "url": busy_url, "max_inflight": 1}],
                                        "routing": FAST_HEALTH, "admin_key_env": ADMIN_ENV}))
        with _reloadable(path) as (gateway, _):
            results: list[tuple[int, list[str]]] = []
            threads = [threading.Thread(target=_stream, args=(gateway, results)) for _ in range(2)]
            threads[0].start()
            wait_for(lambda: busy.state.in_flight == 1)
            threads[1].start()
            wait_for(lambda: metric(gateway, "semsched_gateway_queue_depth") == 1)  # no slot: it waits
            path.write_text(yaml.safe_dump({"backends": [{"name": "b0", "url": busy_url, "max_inflight": 1},
                                                         {"name": "b1", "url": added_url}],
                                            "routing": FAST_HEALTH, "admin_key_env": ADMIN_ENV}))
            assert _reload(gateway).json()["added"] == ["b1"]
            wait_for(lambda: len(added.state.calls) == 1)  # served by the new backend, b0 still busy
            assert busy.state.in_flight == 1 and len(busy.state.calls) == 1
            busy.state.token_delay_s = 0.0
            for thread in threads:
                thread.join(timeout=30)
            assert len(results) == 2 and all(status == 200 and _whole(events) for status, events in results)
