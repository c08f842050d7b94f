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


def test_vllm_runs_check_config_as_a_general_plugin_before_anything_else(tmp_path: Path) -> None:
    """vLLM calls its general plug-ins while it parses a server's arguments and first thing in an engine process.
    A distribution that declares ``semsched.vllm.config:check_config`` under ``vllm.general_plugins`` (as
    semsched's own metadata should) makes a bad ``SEMSCHED_POLICY`` stop that call with one line."""
    import os
    import subprocess
    import sys

    info = tmp_path / "semsched_check-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: semsched-check\nVersion: 0\n")
    entry = "[vllm.general_plugins]\nsemsched = semsched.vllm.config:check_config\n"
    (info / "entry_points.txt").write_text(entry)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]), SEMSCHED_POLICY="teleport")
    code = "from vllm.plugins import load_general_plugins; load_general_plugins(); print('not stopped')"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and "not stopped" not in result.stdout
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("semsched: SEMSCHED_POLICY: policy 'teleport': unknown")
    assert "Traceback" not in result.stderr
