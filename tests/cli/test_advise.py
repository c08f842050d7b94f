"""``semsched advise``: the advice is the eligible contender with the smallest worst regret, computed from the runs
it reports; oracle and stranding contenders are shown, never advised; bad input is one error naming the option."""

import json
from pathlib import Path

import numpy as np
import pytest

from semsched.cli import main
from semsched.core.tiers import DEFAULT_TIERS, TierSpec
from semsched.experiments.advise import AdviseSettings, tier_weights, windows
from semsched.metrics.goodput import TIER_WEIGHTS
from semsched.sim.runner import ClusterSpec

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
CODE_TRACE = DATA / "azure_llm_2023_code.csv"
SMALL = ["--requests", "120", "--seeds", "2", "--loads", "0.6,1.3", "--workers", "1"]


def _advise(tmp_path: Path, *extra: str) -> dict:
    out = tmp_path / "advice"
    assert main(["advise", *SMALL, *extra, "--out", str(out)]) == 0
    return json.loads((out / "advice.json").read_text())


def _medians(contender: dict, loads: list[float]) -> list[float]:
    return [float(np.median([r["goodput"] for r in contender["runs"] if r["load"] == x])) for x in loads]


@pytest.mark.skipif(not CODE_TRACE.is_file(), reason="needs ../shared/data")
def test_advice_on_a_real_trace_is_the_smallest_worst_regret(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    report = _advise(tmp_path, "--workload", str(CODE_TRACE), "--contenders", "fcfs,priority,tiered")
    loads = report["loads"]
    contenders = {c["label"]: c for c in report["contenders"]}
    assert set(contenders) == {"vllm-fcfs", "fcfs", "priority", "tiered"}  # the baseline is always added
    eligible = [c for c in contenders.values() if not c["ineligible"]]
    best = [max(_medians(c, loads)[i] for c in eligible) for i in range(len(loads))]
    regret = {c["label"]: max(b / m for b, m in zip(best, _medians(c, loads), strict=True)) for c in eligible}
    for label, value in regret.items():
        assert contenders[label]["worst_regret"] == pytest.approx(value)
    assert report["advice"]["label"] == min(regret, key=lambda k: (regret[k], k))
    assert report["advice"]["environment"] == f"SEMSCHED_POLICY='{report['advice']['spec']}'"
    assert all(len(c["runs"]) == len(loads) * 2 for c in contenders.values())
    out = capsys.readouterr().out
    assert f"Run {report['advice']['spec']}" in out and "router: round-robin" in out


def test_an_oracle_contender_is_shown_but_never_advised(tmp_path: Path) -> None:
    report = _advise(tmp_path, "--contenders", "fcfs,sjf,gittins")
    rows = {c["label"]: c for c in report["contenders"]}
    assert "length=oracle" in rows["sjf"]["ineligible"]  # sjf's default reads the true lengths
    assert rows["gittins"]["ineligible"] == ""  # predicted online from prompt lengths (the default predictor)
    assert report["advice"]["label"] != "sjf"
    # without a predictor, a policy that orders by predicted lengths would see the true ones: not advised
    bare = _advise(tmp_path / "bare", "--contenders", "fcfs,gittins", "--no-predictor")
    gittins = next(c for c in bare["contenders"] if c["label"] == "gittins")
    assert "predicted lengths" in gittins["ineligible"] and bare["advice"]["label"] != "gittins"


def test_windows_of_a_trace_are_disjoint_and_full(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    rows += [f"2023-11-16 18:00:{i // 100:02d}.{i % 100:02d}0000,{100 + i},{10 + i % 7}" for i in range(600)]
    trace.write_text("\n".join(rows) + "\n")
    settings = AdviseSettings(workload=str(trace), cluster=ClusterSpec(), seeds=3, requests=150)
    seeds = windows(settings)
    assert [len(w) for w in seeds] == [150, 150, 150]
    firsts = [set(w.prompt_tokens.tolist()) for w in seeds]  # prompt lengths are unique per row here
    assert not firsts[0] & firsts[1] and not firsts[1] & firsts[2]


def test_tier_weights_follow_the_goodput_table_and_halve_for_a_table_of_yours() -> None:
    assert tier_weights(DEFAULT_TIERS) == TIER_WEIGHTS
    mine = (TierSpec("GOLD", 5, 0.5, 1.0), TierSpec("SILVER", 7, 0.3, 2.0), TierSpec("BRONZE", 9, 0.2, None))
    assert tier_weights(mine) == {5: 4.0, 7: 2.0, 9: 1.0}


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["--requests", "10"], "--requests"),
        (["--loads", "0.5,0"], "--loads"),
        (["--seeds", "0"], "--seeds"),
        (["--workload", "/no/such/trace.csv"], "--workload"),
        (["--contenders", "teleport"], "teleport"),
        (["--profile", "no-such-profile"], "--profile"),
    ],
)
def test_bad_input_is_one_error_naming_the_option(argv: list[str], names: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["advise", *argv, "--out", str(tmp_path / "o"), "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and names in err


def test_a_trace_too_short_to_compare_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "short.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     + "".join(f"2023-11-16 18:00:0{i}.000000,100,10\n" for i in range(5)))
    assert main(["advise", "--workload", str(trace), "--contenders", "fcfs", "--out", str(tmp_path / "o"),
                 "--workers", "1"]) == 2
    assert "--workload" in capsys.readouterr().err


def test_contenders_are_priced_with_the_users_engine() -> None:
    from semsched.experiments.scoreboard import priced_with

    assert priced_with("slide-batching:profile=a100-qwen1.5-7b;first_token_weight=4.7", "my-engine") == \
        "slide-batching:profile=my-engine;first_token_weight=4.7"
    assert priced_with("tiered", "my-engine") == "tiered:profile=my-engine"
    assert priced_with("fcfs", "my-engine") == "fcfs"  # no latency model to price with
