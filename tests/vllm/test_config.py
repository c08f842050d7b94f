from pathlib import Path

import pytest

from semsched.vllm.config import AdapterConfigError, load_adapter_config


def test_default_is_fcfs() -> None:
    config = load_adapter_config({})
    assert config.policy_spec == "fcfs" and config.make_policy().name == "fcfs"


def test_policy_from_environment() -> None:
    config = load_adapter_config({"SEMSCHED_POLICY": "priority-preempt:exclusive=true"})
    policy = config.make_policy()
    assert policy.name == "priority-preempt" and policy.describe()["exclusive"] is True


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_policy_from_file(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"semsched{suffix}"
    text = '{"policy": "edf:deadline=e2e", "metrics_port": 9400}'
    path.write_text(text if suffix == ".json" else "policy: edf:deadline=e2e\nmetrics_port: 9400\n")
    config = load_adapter_config({"SEMSCHED_CONFIG": str(path)})
    assert config.policy_spec == "edf:deadline=e2e" and config.metrics_port == 9400


@pytest.mark.parametrize(
    ("env", "file_text", "expected"),
    [
        ({"SEMSCHED_POLICY": "nope"}, None, "SEMSCHED_POLICY: policy 'nope': unknown policy"),
        ({"SEMSCHED_POLICY": "priority-preempt:mode=teleport"}, None, "mode must be"),
        ({"SEMSCHED_POLICY": "fcfs"}, "policy: fcfs\n", "not both"),
        ({}, "policy: fcfs\ncolour: red\n", "unknown key(s) ['colour']"),
        ({}, "metrics_port: 9400\n", "policy: must be a non-empty policy spec"),
        ({}, "policy: fcfs\nmetrics_port: 70000\n", "metrics_port: must be an integer from 1 to 65535"),
        ({}, "- a list\n", "must be a mapping"),
        ({}, "policy: [unclosed\n", "not valid"),
    ],
)
def test_errors_name_the_source_and_key(tmp_path: Path, env: dict[str, str], file_text: str | None,
                                        expected: str) -> None:
    environ = dict(env)
    if file_text is not None:
        path = tmp_path / "semsched.yaml"
        path.write_text(file_text)
        environ["SEMSCHED_CONFIG"] = str(path)
    with pytest.raises(AdapterConfigError) as info:
        load_adapter_config(environ)
    assert expected in str(info.value)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(AdapterConfigError, match="SEMSCHED_CONFIG=.*missing.yaml: cannot read"):
        load_adapter_config({"SEMSCHED_CONFIG": str(tmp_path / "missing.yaml")})


def test_the_active_policy_is_described_as_a_full_spec() -> None:
    from semsched.policies import make_policy
    from semsched.vllm.config import describe_policy

    assert describe_policy(make_policy("priority-preempt:exclusive=true")) == (
        "priority-preempt:exclusive=true;mode=recompute"
    )
    assert describe_policy(make_policy("fcfs")) == "fcfs"


def test_check_config_stops_the_process_with_one_line() -> None:
    from semsched.vllm.config import check_config

    check_config({})  # nothing set: nothing to check (vLLM runs general plug-ins whatever the scheduler)
    check_config({"SEMSCHED_POLICY": "edf:deadline=ttft;preempt=true"})
    with pytest.raises(SystemExit) as info:
        check_config({"SEMSCHED_POLICY": "priority-preempt:mode=teleport"})
    assert str(info.value).startswith("semsched: SEMSCHED_POLICY: policy 'priority-preempt:mode=teleport': ")
    assert "\n" not in str(info.value)


def test_semsched_declares_check_config_as_a_vllm_general_plugin() -> None:
    from importlib.metadata import entry_points

    values = {entry.value for entry in entry_points(group="vllm.general_plugins") if entry.name == "semsched"}
    assert values == {"semsched.vllm.config:check_config"}


def test_vllm_runs_check_config_as_a_general_plugin_before_anything_else() -> None:
    """vLLM calls its general plug-ins while it parses a server's arguments and first thing in an engine process;
    semsched's installed metadata declares ``check_config`` there, so a bad ``SEMSCHED_POLICY`` stops that call
    with one line."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, SEMSCHED_POLICY="teleport")
    code = "from vllm.plugins import load_general_plugins; load_general_plugins(); print('not stopped')"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and "not stopped" not in result.stdout
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("semsched: SEMSCHED_POLICY: policy 'teleport': unknown")
    assert "Traceback" not in result.stderr


def test_policy_modules_are_imported_before_the_spec_is_resolved(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from semsched.policies import POLICIES
    from semsched.vllm.config import load_adapter_config

    module = tmp_path / "semsched_user_policy.py"
    module.write_text(
        "from semsched.policies import register_policy\n"
        "from semsched.policies.fcfs import FCFS\n\n"
        "@register_policy\n"
        "class Mine(FCFS):\n"
        "    name = 'user-mine'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        config = load_adapter_config({"SEMSCHED_POLICY": "user-mine",
                                      "SEMSCHED_POLICY_MODULES": " semsched_user_policy "})
        assert config.make_policy().name == "user-mine"
    finally:
        POLICIES.unregister("user-mine")


@pytest.mark.parametrize(
    ("modules", "message"),
    [
        ("semsched_no_such_module", "SEMSCHED_POLICY_MODULES: cannot import 'semsched_no_such_module': "
                                    "ModuleNotFoundError"),
        ("semsched.policies,,", "SEMSCHED_POLICY_MODULES='semsched.policies,,': an empty module name"),
    ],
)
def test_bad_policy_modules_name_the_variable(modules: str, message: str) -> None:
    from semsched.vllm.config import check_config

    with pytest.raises(SystemExit) as info:
        check_config({"SEMSCHED_POLICY_MODULES": modules})
    assert str(info.value).startswith(f"semsched: {message}")
    assert "\n" not in str(info.value)
