"""``--predictor`` is repeatable: a predictor cost (immediate:/full:) and an online length predictor
(length=NAME;...), each at most once, checked before any run and recorded in the run's description."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from semsched.cli import main
from semsched.core.request import LengthDistribution
from semsched.predict.online import Prompts
from semsched.sim import prediction as prediction_module
from semsched.workloads.traces import data_dir

COST = "immediate:latency_s=0.01;batch_size=8"


class MeanOfHistory:
    """A fake online predictor: the mean of what has finished so far (100 tokens before anything has)."""

    name = "mean-of-history"

    def __init__(self) -> None:
        self.lengths: list[int] = []

    def predict(self, prompts: Prompts) -> list[LengthDistribution]:
        mean = round(float(np.mean(self.lengths))) if self.lengths else 100
        return [LengthDistribution.point(max(1, mean)) for _ in prompts.texts]

    def observe(self, prompts: Prompts, output_tokens: npt.NDArray[np.int64]) -> None:
        self.lengths.extend(output_tokens.tolist())


@pytest.fixture
def specs_given(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Fake predictor factory and embeddings; the predictor specs the factory was given."""
    given: list[str] = []

    def factory(spec: str) -> MeanOfHistory:
        if not spec.startswith("mean-of-history"):
            from semsched.core.errors import SemschedError

            raise SemschedError(f"unknown length predictor {spec.partition(':')[0]!r}")
        given.append(spec)
        return MeanOfHistory()

    def encode(texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.full((len(texts), 4), 0.5, dtype=np.float32)

    monkeypatch.setattr(prediction_module, "predictor_factory", lambda: factory)
    monkeypatch.setattr(prediction_module, "embed_texts", encode)
    return given


def _mt_bench() -> str:
    return f"mt-bench:answers={data_dir() / 'mt_bench' / 'model_answer' / 'claude-v1.jsonl'}"


@pytest.mark.data
def test_a_cost_and_a_length_predictor_together(tmp_path: Path, specs_given: list[str]) -> None:
    argv = ["simulate", "--policy", "fcfs,sjf", "--workload", _mt_bench(), "--rate", "2", "--duration", "30",
            "--predictor", COST, "--predictor", "length=mean-of-history;warmup=a.json", "--out", str(tmp_path)]
    assert main(argv) == 0
    assert specs_given[0] == "mean-of-history:warmup=a.json" and len(specs_given) == 3  # checked, then per run
    meta = json.loads((tmp_path / "summary.json").read_text())["meta"]
    assert meta["predictor"] == COST
    assert meta["length_predictor"] == "length=mean-of-history;warmup=a.json"
    with (tmp_path / "requests.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 2 * meta["num_requests"] > 0
    predicted = [float(row["predicted_length"]) for row in rows]  # every request carries a prediction
    assert predicted[0] == 100.0 and len(set(predicted)) > 1  # the history moved it


@pytest.mark.data
def test_sweep_takes_a_length_predictor(tmp_path: Path, specs_given: list[str]) -> None:
    argv = ["sweep", "--policy", "sjf", "--workload", _mt_bench(), "--rates", "1,2", "--duration", "20",
            "--predictor", "length=mean-of-history;latency_s=0.2", "--out", str(tmp_path)]
    assert main(argv) == 0
    meta = json.loads((tmp_path / "sweep.json").read_text())["meta"]
    assert meta["length_predictor"] == "length=mean-of-history;latency_s=0.2" and meta["predictor"] is None


@pytest.mark.parametrize(
    ("predictors", "needles"),
    [
        ([COST, "full:latency_s=0.1;batch_size=4"], ["--predictor", "two predictor costs"]),
        (["length=mean-of-history", "length=mean-of-history;a=1"], ["--predictor", "two length predictors"]),
        (["length=mean-of-history;latency_s=abc"], ["--predictor", "latency_s", "'abc'"]),
        (["length=mean-of-history:threshold=0.8"], ["--predictor", "length=mean-of-history;threshold=0.8"]),
        (["length=nope"], ["--predictor", "length=nope", "unknown length predictor 'nope'"]),
        ([COST, "length=mean-of-history;latency_s=0.1"], ["--predictor", "latency_s", "leave latency_s out"]),
        (["immediate:latency_s=0.01"], ["--predictor", "batch_size"]),
    ],
)
def test_bad_predictor_options_are_one_clear_line(
    predictors: list[str], needles: list[str], specs_given: list[str], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["simulate", "--duration", "5", "--out", str(tmp_path / "out")]
    for spec in predictors:
        argv += ["--predictor", spec]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    assert not (tmp_path / "out").exists()


def test_a_workload_without_prompts_is_refused_before_the_run(
    specs_given: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", "--workload", "azure-conv", "--duration", "5", "--predictor", "length=mean-of-history",
            "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--predictor" in err and "carries no prompt texts" in err
    assert not (tmp_path / "out").exists()
