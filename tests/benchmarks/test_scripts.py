"""Smoke tests for ``benchmarks/``: each script runs end to end on a tiny configuration and writes its JSON.

The numbers are not checked (they are machine-dependent); the tests guard against the scripts rotting as the
APIs they drive change.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from semsched.compiled import status as compiled_status
from semsched.policies import POLICIES

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def run_script(name: str, *args: str, json_path: Path) -> dict[str, object]:
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *args, "--json", str(json_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert "| policy |" in completed.stdout  # the Markdown table
    payload: dict[str, object] = json.loads(json_path.read_text())
    return payload


def test_scheduler_overhead_smoke(tmp_path: Path) -> None:
    payload = run_script(
        "scheduler_overhead.py",
        "--policies",
        "fcfs,priority-preempt:exclusive=true",
        "--queue-sizes",
        "10,100",
        "--running",
        "8",
        "--repeats",
        "5",
        "--warmup",
        "1",
        json_path=tmp_path / "overhead.json",
    )
    results = payload["results"]
    assert isinstance(results, list) and len(results) == 4
    assert all(len(r["step_ms"]) == 5 for r in results)


def test_scheduler_overhead_keeps_every_policy_steady_for_the_default_measurement(tmp_path: Path) -> None:
    """``--policies all`` with the default warm-up and repeats (the simulated span of the real run), on a small
    batch and queue: every policy's steps stay steady throughout (the script stops at the first that is not: ltr's
    starvation promotion preempted the running batch 10 s after the queue arrived, and the full run never
    finished)."""
    payload = run_script(
        "scheduler_overhead.py", "--policies", "all", "--queue-sizes", "10,100", "--running", "16",
        json_path=tmp_path / "overhead.json",
    )
    results = payload["results"]
    assert isinstance(results, list) and {r["policy"].split(":")[0] for r in results} >= set(POLICIES.names())
    assert all(len(r["step_ms"]) == 500 for r in results)


def test_scheduler_overhead_time_budgeted_policy_few_repeats(tmp_path: Path) -> None:
    """sarathi's time budget lets fewer tokens into a step than the engine's token budget, so the running batch
    takes more steps to finish its prompts (decoding all the while) than the harness's first estimate: with few
    measured steps the KV cache sized from that estimate ran out and a victim was preempted."""
    payload = run_script(
        "scheduler_overhead.py", "--policies", "sarathi-fcfs", "--queue-sizes", "10", "--running", "256",
        "--repeats", "3", "--warmup", "1", json_path=tmp_path / "overhead.json",
    )
    results = payload["results"]
    assert isinstance(results, list) and len(results) == 1
    assert len(results[0]["step_ms"]) == 3


@pytest.mark.data
def test_sim_throughput_smoke(tmp_path: Path) -> None:
    payload = run_script(
        "sim_throughput.py", "--policies", "fcfs,sjf", "--num-requests", "200", json_path=tmp_path / "sim.json"
    )
    results = payload["results"]
    assert isinstance(results, list) and [r["policy"] for r in results] == ["fcfs", "sjf"]
    assert all(r["identical"] is True for r in results)
    # sjf's ratio is taken against the fcfs run beside it, fcfs's own is 1
    assert results[0]["adjacent_reference_wall_s"] is None and results[0]["ratio_to_reference"] == 1.0
    adjacent = results[1]["adjacent_reference_wall_s"]
    assert adjacent > 0
    assert results[1]["ratio_to_reference"] == adjacent / results[1]["fast_forward"]["wall_s"]


def test_policy_hooks_times_the_hooks_a_scheduler_calls(tmp_path: Path) -> None:
    payload = run_script(
        "policy_hooks.py", "--policies", "sarathi-fcfs,fcfs", "--num-requests", "200",
        json_path=tmp_path / "hooks.json",
    )
    policies = payload["policies"]
    assert isinstance(policies, dict) and list(policies) == ["sarathi-fcfs", "fcfs"]
    sarathi, fcfs = policies["sarathi-fcfs"], policies["fcfs"]
    # sarathi's step budget is asked at every step; fcfs keeps the base one, which no scheduler calls
    assert sarathi["calls"]["step_budget"] > 0 and fcfs["calls"]["step_budget"] == 0
    assert sarathi["calls"]["on_arrival"] == fcfs["calls"]["on_arrival"] == 200
    for run in (sarathi, fcfs):
        assert 0.0 <= sum(run["hooks_s"].values()) <= run["run_s"]


@pytest.mark.data
@pytest.mark.parametrize(("script", "policies"), [
    ("aging_classes.py", ["tiered", "tiered:aging_per_s=1;rekey_s=0.25"]),
    ("semantic_certificates.py", ["semantic", "semantic:stage_aware=level"]),
    ("timed_rekey.py", ["gittins:slo_slack=0.5", "mean:slo_slack=0.8;protect_priority=2"]),
])
def test_shortcut_scripts_compare_the_shortcut_with_the_long_way(
    tmp_path: Path, script: str, policies: list[str]
) -> None:
    payload = run_script(script, "--cases", "azure-code-trace@8", "--seeds", "0", "--num-requests", "300",
                         "--policies", ",".join(policies), json_path=tmp_path / "shortcut.json")
    cases = payload["cases"]
    assert isinstance(cases, list)
    assert [case["policy"] for case in cases] == policies
    assert payload["differing"] == 0 and all(case["identical"] for case in cases)
    assert all(sum(case["states"].values()) == 300 for case in cases)
    # (how often the shortcut was taken: counted for semantic's certificates and the keys' times)
    counted = script in ("semantic_certificates.py", "timed_rekey.py")
    assert all(isinstance(case["uses"], int) == counted for case in cases)
    if script == "timed_rekey.py":
        assert all(case["uses"] > 0 for case in cases)


@pytest.mark.data
@pytest.mark.parametrize("builds", [False, True], ids=["one build", "both builds"])
def test_fast_forward_script_compares_both_modes_on_other_traffic(tmp_path: Path, builds: bool) -> None:
    """``fast_forward.py``: each case with fast-forward and per iteration (a speculative case among them); with
    ``--both-builds``, the fast-forward runs again on the Python sources in a child process."""
    if builds and not compiled_status().in_use:
        pytest.skip(f"--both-builds needs the compiled core ({compiled_status().reason})")
    policies = ["sjf", "laps-sd"]
    payload = run_script("fast_forward.py", "--cases", "azure-code-trace@8,mbpp-spec@45+eagle", "--seeds", "0",
                         "--num-requests", "150", "--policies", ",".join(policies),
                         *(["--both-builds"] if builds else []), json_path=tmp_path / "ff.json")
    cases = payload["cases"]
    assert isinstance(cases, list)
    assert [(case["speculation"], case["policy"]) for case in cases] == [
        (None, "sjf"), (None, "laps-sd"), ("eagle", "sjf"), ("eagle", "laps-sd")]
    assert payload["differing"] == 0 and all(case["identical"] for case in cases)
    assert all(sum(case["states"].values()) == 150 for case in cases)
    # (the digests tell the runs apart: a comparison of them can fail)
    assert len({case["digest"] for case in cases}) == len(cases)


def test_shortcut_cases_name_their_speculation_and_refuse_bad_ones() -> None:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from shortcuts import Case, parse_cases
    finally:
        sys.path.remove(str(BENCHMARKS))
    assert parse_cases("azure-code-trace@8,spec-bench:log=eagle@14+eagle,x.csv@1.5+sps-68m:fitted") == [
        Case("azure-code-trace", 8.0), Case("spec-bench:log=eagle", 14.0, "eagle"),
        Case("x.csv", 1.5, "sps-68m:fitted")]
    for bad, says in (("azure-code-trace", "WORKLOAD@RATE"), ("azure-code-trace@8+", "WORKLOAD@RATE+PRESET"),
                      ("azure-code-trace@fast", "is not a number"), ("azure-code-trace@8+nope", "nope")):
        with pytest.raises(SystemExit, match=re.escape(says)):
            parse_cases(bad)


@pytest.mark.data
def test_long_context_smoke(tmp_path: Path) -> None:
    payload = run_script(
        "long_context.py", "--policies", "fcfs,slide-batching", "--rates", "0.05", "--seeds", "0",
        "--duration", "120", json_path=tmp_path / "long.json",
    )
    results = payload["results"]
    assert isinstance(results, list) and [r["policy"] for r in results] == ["fcfs", "slide-batching"]
    assert all(r["finished"] + r["rejected"] + r["dropped"] == r["requests"] for r in results)


def run_engine_script(name: str, *args: str, json_path: Path, table: str) -> dict[str, Any]:
    """Run a benchmark that starts vLLM engines (a few minutes at most) and return its JSON dump."""
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *args, "--json", str(json_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert table in completed.stdout  # the Markdown table's header
    payload: dict[str, Any] = json.loads(json_path.read_text())
    return payload


@pytest.mark.vllm
@pytest.mark.slow
def test_batch_size_cost_smoke(tmp_path: Path) -> None:
    payload = run_engine_script(
        "batch_size_cost.py", "--sizes", "4", "--budget", "64", json_path=tmp_path / "sizes.json",
        table="| oneDNN cache |",
    )  # fmt: skip
    runs = payload["runs"]
    assert [run["capacity"] for run in runs] == ["default (1024)", str(16 * 64)]
    for run in runs:
        assert len(run["first"]) == len(run["revisit"]) == 4
        assert all(1 <= size <= 64 for size, _, _ in run["first"])


@pytest.mark.vllm
def test_vllm_overhead_scheduler_only_counts_the_steps_a_policy_spends_displacing(tmp_path: Path) -> None:
    """srpt ranks the queued short requests before the running ones, so some of its steps preempt and admit (work
    vLLM's own scheduler never does in this state); fcfs's and vLLM's steps are all steady. With ``--arrivals``
    and ``--kv-queues``, each policy's bursts and KV-bound steps are timed at each size, and the periodic re-key
    of a policy that has one (tiered)."""
    payload = run_engine_script(
        "vllm_overhead.py", "--scheduler-only", "--policies", "fcfs,srpt,tiered", "--running", "16",
        "--waiting", "40", "--scheduler-steps", "30", "--scheduler-rounds", "2", "--arrivals",
        "--burst-sizes", "10,40", "--kv-queues", "--kv-queue-sizes", "40,80", json_path=tmp_path / "overhead.json",
        table="| steady steps |",
    )
    for mode in ("sync", "async"):
        busy = payload["scheduler"][mode]["busy"]
        assert {policy: len(flags) for policy, flags in busy.items()} == {"vllm": 30, "fcfs": 30, "srpt": 30,
                                                                             "tiered": 30}
        assert not any(busy["vllm"]) and not any(busy["fcfs"])
        assert any(busy["srpt"])
    arrivals = payload["arrivals"]
    costs = arrivals["seconds_per_request"]
    assert arrivals["sizes"] == [10, 40]
    assert {policy: len(per_size) for policy, per_size in costs.items()} == {"fcfs": 2, "srpt": 2, "tiered": 2}
    assert all(cost > 0 for per_size in costs.values() for cost in per_size)
    queues = payload["kv_queues"]
    assert queues["sizes"] == [40, 80] and set(queues["step_ms"]) == {"fcfs", "srpt", "tiered"}
    assert all(len(per_size) == 2 and min(per_size) > 0 for per_size in queues["step_ms"].values())
    rekeys = queues["rekey_ms"]
    assert rekeys["fcfs"] == rekeys["srpt"] == [None, None]  # (their order does not drift: no re-key)
    assert len(rekeys["tiered"]) == 2 and all(ms > 0 for ms in rekeys["tiered"])
    bursts = queues["burst_rekey_ms"]  # (the re-key after a burst: tiered files it into its classes there)
    assert bursts["fcfs"] == [None, None] and len(bursts["tiered"]) == 2 and all(ms > 0 for ms in bursts["tiered"])


@pytest.mark.vllm
@pytest.mark.slow
def test_engine_speed_drift_smoke(tmp_path: Path) -> None:
    payload = run_engine_script(
        "engine_speed_drift.py", "--rounds", "3", json_path=tmp_path / "drift.json", table="| what |"
    )
    assert len(payload["probes_s"]) == 3 and all(len(row) == 2 for row in payload["probes_s"])
    assert len(payload["rounds_vs_median"]) == 3 and len(payload["engine_vs_round"]) == 2
    assert len(payload["kernels_s"]) == 3 and set(payload["kernel_correlation_with_probe"]) == {
        "cache-resident kernel", "memory-streaming kernel"}


@pytest.mark.vllm
@pytest.mark.slow
def test_idle_wakeup_smoke(tmp_path: Path) -> None:
    payload = run_engine_script(
        "idle_wakeup.py", "--idle-ms", "5", "--trials", "2", json_path=tmp_path / "wakeup.json",
        table="| idle before arrival |",
    )  # fmt: skip
    times = payload["times_s"]
    assert list(times) == ["5"] and [len(side) for side in times["5"]] == [2, 2]


@pytest.mark.data
def test_fidelity_runs_summarises_runs_and_recomputes_the_full_profile_load(tmp_path: Path) -> None:
    """Two synthetic ``semsched fidelity --out`` directories, one from before the report carried the full
    profile's saturation rate and the errors on the machine's speed: the script reads both and recomputes what
    is missing from the profile and the old run's steps and requests (a machine 25 % slower throughout)."""
    from semsched.calibrate import fidelity
    from semsched.calibrate.profiling import EngineSettings
    from semsched.latency import BatchConfig, BatchLatencyModel, save_profile
    from semsched.workloads import find_data_file, rescale_to_rate

    model = BatchLatencyModel(BatchConfig(2e-3, 1e-5, 1e-8, 0.0, 2e-4, 1e-8), name="synthetic")
    trace = str(find_data_file(fidelity.DEFAULT_TRACE_FILE))
    settings = EngineSettings(model="unused", max_model_len=2048)
    workload, _ = fidelity.load_slice(trace, 50, max_model_len=2048, seed=0)
    capacity = fidelity.saturation_rate(workload, fidelity.scheduler_config(settings), model)
    errors = {"ttft_mean": {"error": -0.05}, "e2e_mean": {"error": 0.02}}
    runs = []
    for name, full in (("new", 0.8 * capacity), ("old", None)):
        run = tmp_path / name
        save_profile(model, run / "profile.yaml", fit={"probe_step_s": 0.002})
        meta = {"trace": trace, "num_requests": 50, "engine": {"max_model_len": 2048}, "seed": 0, "repeats": 3,
                "rate_per_s": 0.3 * capacity, "simulated_saturation_rate_per_s": capacity,
                "full_profile_saturation_rate_per_s": full}
        policy = {"metrics": errors, "replays": [{"probe_before_s": 0.002, "probe_after_s": 0.003}]}
        (run / "fidelity.json").write_text(json.dumps({"meta": meta, "worst_mean_error": 0.05,
                                                       "policies": {"fcfs": policy}}))
        runs.append(str(run))
    old = tmp_path / "old"
    meta["engine"] |= {"max_num_seqs": settings.max_num_seqs, "block_size": settings.block_size,
                       "max_num_batched_tokens": settings.max_num_batched_tokens, "kv_blocks": settings.kv_blocks}
    (old / "fidelity.json").write_text(json.dumps({"meta": meta, "worst_mean_error": 0.05,
                                                   "policies": {"fcfs": policy}}))
    _write_slow_replay(old, rescale_to_rate(workload, 0.3 * capacity), settings, model, 1.25)
    json_path = tmp_path / "runs.json"
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "fidelity_runs.py"), *runs, "--json", str(json_path)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert "| run | repeats | fcfs TTFT | fcfs E2E |" in completed.stdout
    rows = {Path(row["run"]).name: row for row in json.loads(json_path.read_text())["runs"]}
    assert rows["old"]["load_full_profile"] == pytest.approx(0.3)  # recomputed: the same profile throughout
    assert rows["new"]["load_full_profile"] == pytest.approx(0.3 / 0.8)  # as the run recorded it
    assert rows["new"]["probe_range"] == pytest.approx([1.0, 1.5])
    assert rows["new"]["worst_given_speed"] is None  # neither reported nor recomputable
    given = rows["old"]["given_speed_errors"]["fcfs"]
    assert given == pytest.approx({"ttft_mean": 0.0, "e2e_mean": 0.0}, abs=2e-3)  # the 25 % taken out
    missing = subprocess.run([sys.executable, str(BENCHMARKS / "fidelity_runs.py"), str(tmp_path)],
                             capture_output=True, text=True, timeout=60, check=False)
    assert missing.returncode != 0 and "no fidelity.json" in missing.stderr


def _write_slow_replay(run: Path, workload: Any, settings: Any, model: Any, slowdown: float) -> None:
    """``steps.csv`` and ``requests.csv`` of one fcfs replay on a machine ``slowdown`` x the profile throughout:
    the simulator's latencies at that speed, and settled decode steps that took ``slowdown`` x their time."""
    import csv

    from semsched.calibrate import fidelity
    from semsched.calibrate.fidelity_report import REQUEST_COLUMNS, STEP_COLUMNS
    from semsched.sim.speed import SpeedTrace

    warm = range(1, settings.max_num_batched_tokens + 1)
    outcome = fidelity.simulate(workload, "fcfs", fidelity.scheduler_config(settings), model, warm_shapes=warm,
                                speed=SpeedTrace(1.0, (slowdown,)))
    real = fidelity.sim_latencies(outcome.requests)
    with (run / "requests.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, REQUEST_COLUMNS, restval="")
        writer.writeheader()
        writer.writerows({"policy": "fcfs", "repeat": 0, "request_id": i, "real_ttft_s": ttft, "real_e2e_s": e2e}
                         for i, (ttft, e2e) in enumerate(zip(real["ttft"], real["e2e"], strict=True)))
    step_s = slowdown * model.step_time_s([], 4, 800)
    end_s = max(r.finish_time_s or 0.0 for r in outcome.requests)
    with (run / "steps.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(STEP_COLUMNS)
        for i in range(int(end_s / 0.05) + 1):
            writer.writerow(["fcfs", 0, f"{0.05 * i:.6f}", step_s, 0, step_s, 0, 0, 0, "", 4, 800, 0, 0])


def test_the_docs_state_sim_throughputs_targets() -> None:
    """The README, docs/benchmarks.md and benchmarks/README.md name the targets the script prints (its
    constants are the one source)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import sim_throughput
    finally:
        sys.path.remove(str(BENCHMARKS))
    rate = f"{sim_throughput.TARGET_FCFS_REQUESTS_PER_WALL_S:,.0f}"
    ratio = f"{sim_throughput.TARGET_RATIO_TO_FCFS:g}x"
    root = BENCHMARKS.parent
    for doc in (root / "README.md", root / "docs" / "benchmarks.md", BENCHMARKS / "README.md"):
        text = doc.read_text(encoding="utf-8")
        assert rate in text and ratio in text, doc
