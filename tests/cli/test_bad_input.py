"""Bad input found when tried as a new user would: one ``error:`` line naming the option and the limit, exit
status 2, no traceback, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from semsched.cli import main


def _fails_with(argv: list[str], needles: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err
    for needle in needles:
        assert needle in err, err


def test_out_under_a_file_is_refused_before_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    _fails_with(["simulate", "--duration", "5", "--out", str(afile / "sub")], ["--out", str(afile)], capsys)
    assert afile.read_text() == "not a directory"


@pytest.mark.parametrize(
    ("rates", "needles"),
    [
        ("", ["--rates", "at least one"]),
        ("1,abc", ["--rates", "'abc'"]),
        ("2,-1", ["--rates", "'-1'"]),
        ("2,2", ["--rates", "twice"]),
        ("1,nan", ["--rates", "'nan'"]),
    ],
)
def test_sweep_rates_are_checked(
    rates: str, needles: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sweep"
    _fails_with(["sweep", "--rates", rates, "--duration", "5", "--out", str(out)], needles, capsys)
    assert not out.exists()


def test_sweep_metric_is_checked_before_any_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep"
    _fails_with(
        ["sweep", "--metric", "e2e_p42", "--duration", "5", "--out", str(out)], ["--metric", "e2e_p42"], capsys
    )
    assert not out.exists()


def test_a_policy_given_twice_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    _fails_with(
        ["simulate", "--policy", "fcfs,sjf,fcfs", "--duration", "5"], ["--policy", "'fcfs'", "twice"], capsys
    )


def test_comma_inside_a_policy_spec_points_to_semicolons(capsys: pytest.CaptureFixture[str]) -> None:
    # "edf:deadline=e2e,preempt=true" splits into "edf:deadline=e2e" and "preempt=true": the second is no policy
    _fails_with(
        ["simulate", "--policy", "edf:deadline=e2e,preempt=true", "--duration", "5"], ["preempt=true"], capsys
    )


def test_predicted_lengths_without_predictions_are_pointed_out(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--policy", "fcfs", "--duration", "5"]) == 0
    assert "no predicted output lengths" not in capsys.readouterr().out
    assert main(["simulate", "--policy", "sjf:length=predicted", "--duration", "5"]) == 0
    out = capsys.readouterr().out
    assert "sjf:length=predicted" in out and "no predicted output lengths" in out


def test_non_finite_duration_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    _fails_with(["simulate", "--duration", "inf"], ["--duration"], capsys)


def test_internal_errors_are_not_disguised_as_user_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only SemschedError becomes an ``error:`` line; a bug (here a ValueError from inside a run) propagates."""
    import semsched.cli.simulate as simulate

    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("a bug, not bad input")

    monkeypatch.setattr(simulate, "run_all", broken)
    with pytest.raises(ValueError, match="a bug"):
        main(["simulate", "--policy", "fcfs", "--duration", "5"])


def test_a_billion_requests_are_refused_before_anything_is_drawn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    _fails_with(["simulate", "--rate", "1e9", "--duration", "1", "--out", str(out)],
                ["1,000,000,000 requests", "limit of 1,000,000", "--max-requests"], capsys)
    assert not out.exists()
    # the option raises the limit: the same arguments with a limit above the count get past the check
    small = ["simulate", "--rate", "50", "--duration", "2", "--out", str(out)]
    _fails_with([*small, "--max-requests", "10"], ["100 requests", "limit of 10"], capsys)
    assert main([*small, "--max-requests", "1000"]) == 0


def test_an_error_is_one_line_whatever_the_terminal_width(capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    _fails_with(["simulate", "--rate", "1e9", "--duration", "1"], ["limit of 1,000,000"], capsys)
    assert main(["simulate", "--rate", "1e9", "--duration", "1"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_an_unknown_speculation_method_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    _fails_with(["simulate", "--speculation", "medusa", "--duration", "5"], ["--speculation", "'medusa'"], capsys)


def test_a_speculation_mode_other_than_fitted_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    _fails_with(["simulate", "--speculation", "eagle:tree", "--duration", "5"], ["--speculation", "':fitted'"],
                capsys)


# ---- issue 28, point 6: the newcomer walk ------------------------------------------------------------------
_HUGE = "1" + "0" * 400  # a 400-digit integer


def _refused_by_argparse(argv: list[str], needles: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err
    for needle in needles:
        assert needle in err, err


@pytest.mark.parametrize("command", [["simulate"], ["sweep", "--rates", "2"], ["reproduce", "demo", "--quick"],
                                     ["fidelity"], ["profile", "--model", "."]])
def test_a_negative_seed_is_refused(command: list[str], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    _fails_with([*command, "--seed", "-1", "--out", str(out)], ["--seed", ">= 0", "-1"], capsys)
    assert not out.exists()


def test_a_negative_seed_is_refused_by_length_eval(capsys: pytest.CaptureFixture[str]) -> None:
    _fails_with(["length", "eval", "--seed", "-1"], ["--seed", ">= 0"], capsys)


@pytest.mark.parametrize("option", ["--gpu-blocks", "--cpu-blocks", "--block-size", "--instances"])
def test_an_enormous_size_is_refused_with_its_limit(option: str, capsys: pytest.CaptureFixture[str]) -> None:
    _fails_with(["simulate", option, _HUGE, "--duration", "5"], [option, "at most"], capsys)


def test_a_billion_instances_are_refused_not_built(capsys: pytest.CaptureFixture[str]) -> None:
    _fails_with(["simulate", "--instances", "1000000000", "--duration", "5"], ["--instances", "1,024"], capsys)


@pytest.mark.parametrize(
    ("option", "value"),
    [("--gpu-blocks", "0"), ("--block-size", "0"), ("--max-seqs", "0"), ("--max-batched-tokens", "0"),
     ("--cpu-blocks", "-1")],
)
def test_a_scheduler_size_error_names_the_option(option: str, value: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    _fails_with(["simulate", option, value, "--duration", "5"], [option], capsys)
    assert main(["simulate", option, value, "--duration", "5"]) == 2
    assert "num_" not in capsys.readouterr().err  # not the SchedulerConfig field (num_gpu_blocks)


def test_a_series_bin_that_makes_billions_of_rows_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert main(["simulate", "--series-bin", "1e-9", "--duration", "5", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert "--series-bin" in captured.err and "Traceback" not in captured.err
    assert "fcfs" not in captured.out  # no table: refused before the run
    assert not out.exists()


def test_urgency_train_checks_its_out_path_before_reading_or_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import semsched.cli.urgency as urgency

    def too_early(*args: object, **kwargs: object) -> None:
        raise AssertionError("the data was read before --out was checked")

    monkeypatch.setattr(urgency, "load_ktas", too_early)
    afile = tmp_path / "afile"
    afile.write_text("a file")
    _fails_with(["urgency", "train", "--data", str(tmp_path / "ktas.csv"), "--out", str(afile / "x")],
                ["--out", str(afile)], capsys)


@pytest.mark.parametrize(
    ("policy", "names"),
    [
        ("priority-preempt:mode=swap", ["mode=swap"]),
        ("tiered:preemption=swap", ["preemption=swap"]),
        ("las", ["preemption=swap", "default"]),  # swap is las's default
        ("semantic:cache=swap", ["cache=swap"]),
    ],
)
def test_swap_without_swap_space_is_refused(policy: str, names: list[str],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    _fails_with(["simulate", "--policy", f"fcfs,{policy}", "--duration", "5"], ["--cpu-blocks", *names], capsys)
    _fails_with(["sweep", "--policy", policy, "--rates", "2", "--duration", "5"], ["--cpu-blocks"], capsys)


def test_swap_with_swap_space_runs(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--policy", "priority-preempt:mode=swap", "--cpu-blocks", "64", "--duration", "5"]
    assert main(argv) == 0


@pytest.mark.parametrize("command", [["simulate"], ["sweep", "--rates", "2"], ["reproduce", "demo", "--quick"],
                                     ["demo"], ["fidelity"], ["profile", "--model", "."],
                                     ["urgency", "train", "--data", "k.csv"], ["bench", "--url", "http://x"]])
def test_an_empty_out_is_refused(command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _refused_by_argparse([*command, "--duration", "5", "--out", ""] if command[0] == "simulate"
                         else [*command, "--out", ""], ["--out", "empty"], capsys)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("args", "names"), [(["--duration", "1e-9"], ["--duration"]),
                                             (["--rate", "1e-300", "--duration", "5"], ["--rate"])])
def test_a_workload_of_no_requests_is_an_error(args: list[str], names: list[str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    _fails_with(["simulate", *args], ["no requests", *names], capsys)


def test_reproduce_list_takes_no_name(capsys: pytest.CaptureFixture[str]) -> None:
    _fails_with(["reproduce", "--list", "extra"], ["--list", "'extra'"], capsys)


def test_a_profile_directory_is_named_as_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fails_with(["simulate", "--profile", str(tmp_path), "--duration", "5"],
                ["--profile", str(tmp_path), "is a directory", "profile name"], capsys)


def test_a_workload_directory_is_named_as_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fails_with(["simulate", "--workload", str(tmp_path), "--duration", "5"],
                [f"workload '{tmp_path}' is a directory", "trace file", "workload name"], capsys)
    assert main(["simulate", "--workload", str(tmp_path), "--duration", "5"]) == 2
    assert "unknown workload" not in capsys.readouterr().err


def test_a_one_row_trace_names_the_file_and_rescale_false(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "one.jsonl"
    trace.write_text('{"timestamp": 391, "input_length": 1494, "output_length": 84, "hash_ids": [0]}\n')
    _fails_with(["simulate", "--workload", str(trace), "--duration", "5"], [str(trace), "rescale=false"], capsys)
    assert "mean_rate" not in capsys.readouterr().err
    assert main(["simulate", "--workload", f"trace:path={trace};rescale=false", "--duration", "600"]) == 0


def test_a_tiny_spike_gap_is_refused_with_a_short_number(capsys: pytest.CaptureFixture[str]) -> None:
    import re

    assert main(["simulate", "--workload", "spikes:gap_s=1e-300", "--duration", "5"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "spikes" in err
    assert re.search(r"\d[\d,]{20}", err) is None, err  # %g, not a 300-digit number


def test_an_unknown_profile_in_a_policy_names_the_policy(capsys: pytest.CaptureFixture[str]) -> None:
    _fails_with(["simulate", "--policy", "semantic:profile=nosuch", "--duration", "5"],
                ["semantic", "profile", "'nosuch'"], capsys)


def test_a_spec_bench_log_without_its_questions_names_the_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "bench" / "model_answer" / "mine.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text("")
    _fails_with(["simulate", "--workload", f"spec-bench:log={log}", "--duration", "5"],
                [str(tmp_path / "bench" / "question.jsonl")], capsys)
    assert main(["simulate", "--workload", f"spec-bench:log={log}", "--duration", "5"]) == 2
    assert "questions=" not in capsys.readouterr().err  # spec-bench has no such parameter
