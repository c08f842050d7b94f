import csv
import json
from pathlib import Path

import numpy as np
import pytest

from semsched.cli import main
from semsched.latency import load_profile, save_profile


def test_simulate_writes_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "simulate",
            "--policy",
            "fcfs,edf:deadline=e2e;preempt=true",
            "--rate",
            "3",
            "--duration",
            "20",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    report = json.loads((tmp_path / "summary.json").read_text())
    assert set(report["results"]) == {"fcfs", "edf:deadline=e2e;preempt=true"}
    rows = (tmp_path / "requests.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + 2 * report["meta"]["num_requests"]
    assert (tmp_path / "comparison.png").stat().st_size > 0
    assert "fcfs" in capsys.readouterr().out


def test_simulate_writes_monitoring_series(tmp_path: Path) -> None:
    argv = ["simulate", "--policy", "fcfs,priority-preempt:mode=swap", "--rate", "6", "--duration", "40",
            "--gpu-blocks", "400", "--cpu-blocks", "100", "--series-bin", "10", "--out", str(tmp_path)]
    assert main(argv) == 0
    with (tmp_path / "series.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    header = list(rows[0])
    assert header[:4] == ["policy", "bin", "start_s", "end_s"]
    expected = {"preemptions_swap", "preemptions_recompute", "preemptions_kv_pressure", "preemptions_priority",
                "swap_blocks_max", "rejections", "queue_depth_mean_p1", "queue_depth_max_p3",
                "slo_compliance_p1", "slo_compliance_rolling_p2", "token_share_p0"}
    assert expected <= set(header)
    for policy in ("fcfs", "priority-preempt:mode=swap"):
        starts = [float(r["start_s"]) for r in rows if r["policy"] == policy]
        assert starts == [10.0 * k for k in range(len(starts))] and len(starts) >= 4
    report = json.loads((tmp_path / "summary.json").read_text())
    for policy, result in report["results"].items():
        preemptions = sum(int(r["preemptions"]) for r in rows if r["policy"] == policy)
        assert preemptions == result["overall"]["num_preemptions"] > 0  # (no drops: every one is counted)
    assert (tmp_path / "series.png").read_bytes().startswith(b"\x89PNG")


def test_sweep_writes_plot(tmp_path: Path) -> None:
    code = main(["sweep", "--policy", "fcfs,sjf", "--rates", "2,3", "--duration", "15", "--out", str(tmp_path)])
    assert code == 0
    assert (tmp_path / "sweep_e2e_mean.png").stat().st_size > 0
    assert [p["rate"] for p in json.loads((tmp_path / "sweep.json").read_text())["results"]["sjf"]] == [2.0, 3.0]


def test_sweep_prints_the_metric_and_what_did_not_finish(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    # 64 blocks of 16 tokens: the longer prompts cannot fit and are rejected
    argv = ["sweep", "--policy", "fcfs,sjf", "--rates", "2,4", "--duration", "20", "--gpu-blocks", "64",
            "--metric", "slo_attainment", "--out", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    results = json.loads((tmp_path / "sweep.json").read_text())["results"]
    assert "slo_attainment by request rate" in out and "rejected/" in out
    rejected = 0
    for policy, points in results.items():
        row = next(line for line in out.splitlines() if line.strip("│┃ ").startswith(f"{policy} "))
        cells = [cell.strip() for cell in row.strip("│").split("│")[1:]]
        for k, point in enumerate(points):
            overall = point["overall"]
            assert cells[2 * k] == f"{overall['slo_attainment'] * 100:.1f}%"
            assert cells[2 * k + 1] == f"{overall['num_rejected']}/{overall['num_dropped']}"
            rejected += overall["num_rejected"]
    assert rejected > 0  # the case this test is about


def test_simulate_says_the_rate_a_workload_with_its_own_timing_has(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--workload", "spikes:gap_s=5", "--rate", "4", "--duration", "20", "--policy", "fcfs",
            "--out", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    rate = json.loads((tmp_path / "summary.json").read_text())["meta"]["rate_per_s"]
    assert rate != 4.0 and "at 4/s" not in out  # --rate is not the spikes' rate
    assert f"at {rate:.3g}/s on average (the workload's own timing; --rate not used)" in out
    assert "keeps its own timing" in out
    assert main([*argv[:2], "spikes", *argv[3:]]) == 0  # a gap from --rate: the header says --rate
    out = capsys.readouterr().out
    assert "at 4/s," in out and "keeps its own timing" not in out


def test_sweep_says_when_the_workload_keeps_its_own_timing(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["sweep", "--workload", "spikes:gap_s=5", "--rates", "1,2", "--duration", "10", "--out", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "keeps its own timing" in out
    results = json.loads((tmp_path / "sweep.json").read_text())["results"]["fcfs"]
    assert results[0]["overall"]["num_requests"] == results[1]["overall"]["num_requests"] > 0
    assert main([*argv[:2], "spikes", *argv[3:]]) == 0  # rate-derived gap: no note
    assert "keeps its own timing" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--policy", "nope"], "unknown policy 'nope'"),
        (["simulate", "--policy", "sjf:length=psychic"], "length"),
        (["simulate", "--policy", "edf:bogus=1"], "unknown parameter 'bogus'"),
        (["simulate", "--rate", "-1"], "--rate"),
        (["simulate", "--workload", "no-such-workload"], "no-such-workload"),
        (["simulate", "--profile", "no-such-profile"], "no-such-profile"),
        (["simulate", "--max-seqs", "0"], "--max-seqs"),
        (["simulate", "--series-bin", "0"], "--series-bin"),
    ],
)
def test_bad_input_is_one_clear_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, "--duration", "5"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and message in err and "Traceback" not in err


def test_malformed_trace_row_names_row_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,12,4\n2023-11-16 18:15:47.1,x,5\n"
    )
    assert main(["simulate", "--workload", str(trace), "--duration", "5"]) == 2
    err = capsys.readouterr().err
    assert "ContextTokens" in err and "row 2" in err


def test_listing_commands(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("policies", "profiles", "workloads"):
        assert main([command]) == 0
    out = capsys.readouterr().out
    assert "priority-preempt" in out and "a100-qwen1.5-7b" in out and "azure-conv" in out
    # parameters with their types and defaults, as the registries describe them
    assert "mode: 'recompute' | 'swap' = 'recompute'" in out
    assert "max_concurrent: int = 100" in out and "tier_weights: float/float/... (optional)" in out


def test_tiers_command_writes_a_template_that_simulate_reads(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tiers", "--yaml"]) == 0
    template = capsys.readouterr().out
    table = tmp_path / "tiers.yaml"
    table.write_text(template.replace("PREMIUM", "GOLD").replace("ttft_slo_ms: 200.0", "ttft_slo_ms: 150.0"))
    assert main(["tiers", str(table)]) == 0
    shown = capsys.readouterr().out
    assert "GOLD" in shown and "150.0" in shown and "PREMIUM" not in shown
    out = tmp_path / "out"
    argv = ["simulate", "--policy", f"fcfs,tiered:tier_table={table}", "--tiers", str(table), "--rate", "3",
            "--duration", "10", "--out", str(out)]
    assert main(argv) == 0
    with (out / "requests.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    gold = [row for row in rows if row["tier"] == "GOLD"]
    assert gold and all(float(row["ttft_slo_s"]) == 0.15 for row in gold)
    assert not any(row["tier"] == "PREMIUM" for row in rows)


def test_a_bad_tier_table_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = tmp_path / "tiers.yaml"
    table.write_text("tiers:\n  - {name: GOLD, priority: 0, ttft_slo: 150}\n")
    assert main(["simulate", "--tiers", str(table), "--duration", "5"]) == 2
    err = capsys.readouterr().err
    assert "--tiers" in err and "tiers[0].ttft_slo: unknown key" in err and "Traceback" not in err
    assert main(["tiers", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read it" in capsys.readouterr().err


@pytest.fixture
def profile_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "profiles"
    monkeypatch.setenv("SEMSCHED_PROFILE_DIR", str(directory))
    return directory


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--engine", "sglang"], "--engine: only 'vllm'"),
        (["--max-seqs", "1"], "max_num_seqs: must be an integer >= 2"),
        (["--max-batched-tokens", "4"], "max_num_batched_tokens: must be an integer >= 16"),
        (["--gpu-blocks", "3"], "num_gpu_blocks: must be an integer >= 64"),
        (["--dtype", "int4"], "dtype: expected one of"),
        (["--grid", "huge"], "grid: unknown grid 'huge'"),
        (["--repeats", "0"], "repeats: must be an integer >= 1"),
        (["--statistic", "p50"], "--statistic: expected one of min, median, mean"),
        (["--timing", "wall"], "--timing: expected one of execute, iteration"),
        (["--out", "profile.txt"], "--out: must end in .yaml, .yml or .json"),
        (["--name", "a100-qwen1.5-7b"], "is a packaged profile"),
        (["--name", "bad/name"], "profile name 'bad/name'"),
    ],
)
def test_profile_bad_input_is_one_clear_line_before_any_engine_starts(
    extra: list[str], message: str, tmp_path: Path, profile_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["profile", "--model", str(tmp_path), *extra]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and message in err and "Traceback" not in err


def test_profile_needs_a_model_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "--model", str(tmp_path / "absent")]) == 2
    assert "--model:" in capsys.readouterr().err


def test_profile_refuses_to_replace_a_profile_without_force(
    tmp_path: Path, profile_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile_dir.mkdir()
    (profile_dir / "mine.yaml").write_text("kind: batch\n")
    assert main(["profile", "--model", str(tmp_path), "--name", "mine"]) == 2
    assert "exists; pass --force" in capsys.readouterr().err


def test_profiles_lists_user_profiles_with_their_path(
    profile_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save_profile(load_profile("a100-qwen1.5-7b-batch"), profile_dir / "mine.yaml")
    text = (profile_dir / "mine.yaml").read_text().replace("name: a100-qwen1.5-7b-batch", "name: mine")
    (profile_dir / "mine.yaml").write_text(text)
    assert main(["profiles"]) == 0
    out = capsys.readouterr().out
    assert "a100-qwen1.5-7b" in out and "mine" in out and str(profile_dir) in out
    assert main(["simulate", "--profile", "mine", "--policy", "fcfs", "--duration", "5"]) == 0


def test_simulate_replays_spec_bench_logs_with_speculation(tmp_path: Path) -> None:
    argv = ["simulate", "--workload", "spec-bench:log=eagle;category=qa", "--speculation", "eagle",
            "--policy", "fcfs,laps-sd", "--rate", "6", "--duration", "10", "--max-seqs", "4",
            "--cpu-blocks", "20000", "--profile", "a100-qwen1.5-7b", "--out", str(tmp_path)]
    assert main(argv) == 0
    with (tmp_path / "requests.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert rows and all(row["state"] == "finished" for row in rows)
    # several tokens per verification round: fewer distinct token times than tokens (TPOT well under a decode)
    assert float(np.median([float(r["tpot_s"]) for r in rows if r["tpot_s"]])) < 0.0133
