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
