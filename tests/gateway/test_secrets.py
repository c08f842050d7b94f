"""Secrets (issue 32): API keys from environment variables or a keys file, never required inline; a missing
variable or an unreadable file is an error naming the field; ``--check`` redacts every key wherever it came
from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from semsched.cli import main
from semsched.gateway.config import GatewayConfigError, config_version, parse_config, redact_key
from tests.fake_openai import fake_openai_app, running_app
from tests.gateway.conftest import config_for, serving

BACKEND = {"name": "a", "url": "http://127.0.0.1:8000"}
BODY = {"model": "tiny", "prompt": "hi", "max_tokens": 2}


def _config(**settings: Any) -> Any:
    return parse_config({"backends": [BACKEND], **settings})


def test_keys_from_a_variable_and_a_file_stand_beside_inline_ones(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAM_A_KEY", "sk-team-a-from-env")
    keys = tmp_path / "keys.yaml"
    keys.write_text(yaml.safe_dump({"sk-from-file": {"tier": "BACKGROUND", "tenant": "f"}}))
    config = _config(api_keys={"team-a": {"tier": "PREMIUM", "tenant": "a", "key_env": "TEAM_A_KEY"},
                               "sk-inline": {"tier": "STANDARD"}}, keys_file=str(keys))
    found = {key: (entry.tier, entry.tenant) for key, entry in config.client_keys().items()}
    assert found == {"sk-team-a-from-env": ("PREMIUM", "a"), "sk-inline": ("STANDARD", None),
                     "sk-from-file": ("BACKGROUND", "f")}
    assert "team-a" not in config.client_keys()  # a key_env entry's name is only a label


@pytest.mark.parametrize(("settings", "named"), [
    ({"api_keys": {"team": {"tier": "PREMIUM", "key_env": "SEMSCHED_TEST_NO_SUCH_VAR"}}},
     "api_keys.team.key_env: environment variable SEMSCHED_TEST_NO_SUCH_VAR is not set"),
    ({"keys_file": "/nonexistent/keys.yaml"}, "keys_file: cannot read /nonexistent/keys.yaml"),
    ({"backends": [{**BACKEND, "api_key_env": "SEMSCHED_TEST_NO_SUCH_VAR"}]},
     "backends[0]: api_key_env: environment variable SEMSCHED_TEST_NO_SUCH_VAR is not set"),
    ({"backends": [{**BACKEND, "api_key": "x", "api_key_env": "HOME"}]}, "api_key or api_key_env, not both"),
    ({"admin_key_env": "SEMSCHED_TEST_NO_SUCH_VAR"}, "admin_key_env: environment variable"),
    ({"admin_key_file": "/nonexistent/admin"}, "admin_key_file: cannot read /nonexistent/admin"),
    ({"admin_key_env": "HOME", "admin_key_file": "/x"}, "admin_key_env or admin_key_file, not both"),
    ({"api_keys": {"team": {"tier": "PREMIUM", "key_env": "not a name"}}}, "api_keys.team.key_env"),
])
def test_a_secret_that_cannot_be_read_is_an_error_naming_the_field(settings: dict[str, Any], named: str) -> None:
    document = {"backends": [BACKEND], **settings}
    with pytest.raises(GatewayConfigError) as error:
        parse_config(document)
    assert named in str(error.value)


def test_a_keys_file_is_checked_and_its_keys_never_shown(tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text(yaml.safe_dump({"sk-secret-in-file": {"tier": "GOLD"}}))
    with pytest.raises(GatewayConfigError) as error:
        _config(keys_file=str(keys))
    assert "unknown tier 'GOLD'" in str(error.value) and "sk-secret-in-file" not in str(error.value)
    keys.write_text(yaml.safe_dump({"sk-secret-in-file": {"tier": "PREMIUM"}}))
    with pytest.raises(GatewayConfigError) as error:
        _config(keys_file=str(keys), api_keys={"sk-secret-in-file": {"tier": "PREMIUM"}})
    assert "also in api_keys" in str(error.value) and "sk-secret-in-file" not in str(error.value)
    keys.write_text("- just a list\n")
    with pytest.raises(GatewayConfigError, match="keys_file: .* must map each key"):
        _config(keys_file=str(keys))


def test_the_version_changes_with_a_key_read_from_a_file(tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text(yaml.safe_dump({"sk-one-1234": {"tier": "PREMIUM"}}))
    first = config_version(_config(keys_file=str(keys)))
    keys.write_text(yaml.safe_dump({"sk-two-1234": {"tier": "PREMIUM"}}))
    assert config_version(_config(keys_file=str(keys))) != first


def test_keys_from_env_and_file_identify_clients_and_reach_the_backend(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLIENT_KEY", "sk-client-env")
    monkeypatch.setenv("BACKEND_KEY", "sk-backend-env")
    keys = tmp_path / "keys.yaml"
    keys.write_text(yaml.safe_dump({"sk-client-file": {"tier": "BACKGROUND"}}))
    backend = fake_openai_app()
    with running_app(backend) as url:
        config = config_for([url], backend={"api_key_env": "BACKEND_KEY"}, require_api_key=True,
                            keys_file=str(keys),
                            api_keys={"env-client": {"tier": "PREMIUM", "key_env": "CLIENT_KEY"}})
        with serving(config) as gateway:
            for key in ("sk-client-env", "sk-client-file"):
                answer = httpx.post(f"{gateway}/v1/completions", json=BODY,
                                    headers={"authorization": f"Bearer {key}"})
                assert answer.status_code == 200
            assert httpx.post(f"{gateway}/v1/completions", json=BODY,
                              headers={"authorization": "Bearer env-client"}).status_code == 401  # a label
    tiers = [call["vllm_xargs"]["tier"] for call in backend.state.calls]
    assert tiers == ["PREMIUM", "BACKGROUND"]
    assert {call["_headers"]["authorization"] for call in backend.state.calls} == {"Bearer sk-backend-env"}


def test_check_redacts_keys_from_every_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    secrets = {"CLIENT_KEY": "sk-client-env-secret", "BACKEND_KEY": "sk-backend-env-secret",
               "ADMIN_KEY": "admin-env-secret"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    keys = tmp_path / "keys.yaml"
    keys.write_text(yaml.safe_dump({"sk-client-file-secret": {"tier": "PREMIUM"}}))
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump({
        "backends": [{**BACKEND, "api_key_env": "BACKEND_KEY"}], "keys_file": str(keys),
        "admin_key_env": "ADMIN_KEY", "api_keys": {"env-client": {"tier": "PREMIUM", "key_env": "CLIENT_KEY"},
                                                   "sk-inline-secret": {"tier": "PREMIUM"}}}))
    assert main(["gateway", "--config", str(path), "--check"]) == 0
    out = capsys.readouterr().out
    for secret in [*secrets.values(), "sk-client-file-secret", "sk-inline-secret"]:
        assert secret not in out
    shown = json.loads(out)
    assert set(shown["api_keys"]) == {redact_key(k) for k in ("sk-client-env-secret", "sk-client-file-secret",
                                                              "sk-inline-secret")}
    assert shown["backends"][0]["api_key"] == redact_key("sk-backend-env-secret")
    assert shown["backends"][0]["api_key_env"] == "BACKEND_KEY" and shown["admin_key_env"] == "ADMIN_KEY"
