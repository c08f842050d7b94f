"""Online length prediction in a run (sim/prediction.py): predictions at hand-over from exactly the requests that
finished before, on the request, shifted by the predictor's latency, the same in both fast-forward modes."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from semsched.core.request import LengthDistribution, Request, RequestState
from semsched.metrics import request_metrics
from semsched.predict.cost import PredictorCost
from semsched.predict.online import Prompts
from semsched.sim import prediction as prediction_module
from semsched.sim.engine import Instance, Simulation, handover_time_s
from semsched.sim.prediction import (
    DEFAULT_LATENCY_S,
    LengthPredictionError,
    LengthPredictorSpec,
    OnlinePrediction,
    apply_latency,
    parse_length_spec,
)
from semsched.sim.runner import ClusterSpec, run_policy
from semsched.workloads import Workload
from tests.support import make_scheduler, random_requests

DIMENSIONS = 4


class RecordingPredictor:
    """A fake online predictor whose answer depends on its history: it records what it was asked and told."""

    name = "recording"

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.asked: list[tuple[str, frozenset[str]]] = []  # (prompt, history at that prediction)
        self.answers: dict[str, LengthDistribution] = {}

    def predict(self, prompts: Prompts) -> list[LengthDistribution]:
        out = []
        for text, tokens in zip(prompts.texts, prompts.prompt_tokens.tolist(), strict=True):
            self.asked.append((text, frozenset(self.seen)))
            guess = 1 + (37 * len(self.seen) + 11 * tokens) % 300
            out.append(LengthDistribution((guess, guess + 50), (0.5, 0.5)))
            self.answers[text] = out[-1]
        return out

    def observe(self, prompts: Prompts, output_tokens: npt.NDArray[np.int64]) -> None:
        assert len(prompts) == len(output_tokens)
        self.seen.extend(prompts.texts)


def fake_encode(texts: Sequence[str]) -> npt.NDArray[np.float32]:
    return np.full((len(texts), DIMENSIONS), 0.5, dtype=np.float32)  # unit rows


def requests_with_prompts(seed: int = 7, count: int = 250, rate: float = 8.0) -> list[Request]:
    """Random requests, each with its own prompt text (its id)."""
    return [dataclasses.replace(r, prompt_text=f"prompt {r.request_id}")
            for r in random_requests(seed, count, rate=rate, max_output=150)]


def run_online(
    requests: list[Request], *, latency_s: float = 0.0, fast_forward: bool = True, policy: str = "sjf",
    instances: int = 1,
) -> tuple[RecordingPredictor, OnlinePrediction, Simulation]:
    from semsched.latency import load_profile
    from semsched.sim.router import make_router

    predictor = RecordingPredictor()
    online = OnlinePrediction.start(predictor, requests, encode=fake_encode)
    apply_latency(requests, latency_s)
    latency = load_profile("a100-qwen1.5-4b")
    cluster = [Instance(make_scheduler(policy, num_gpu_blocks=600), latency) for _ in range(instances)]
    simulation = Simulation(cluster, make_router("round-robin"), fast_forward=fast_forward,
                            on_handover=online.handed_over, on_finish=online.finished)
    simulation.run(requests)
    return predictor, online, simulation


def _by_text(requests: Sequence[Request]) -> dict[str, Request]:
    return {r.prompt_text or "": r for r in requests}


# ---- the history is exactly what finished before the hand-over -------------------------------------------
@pytest.mark.parametrize("latency_s", [0.0, 0.4])
@pytest.mark.parametrize("instances", [1, 2])
def test_each_prediction_sees_exactly_the_requests_finished_before_its_hand_over(
    latency_s: float, instances: int
) -> None:
    requests = requests_with_prompts()
    predictor, online, _ = run_online(requests, latency_s=latency_s, instances=instances)
    by_text = _by_text(requests)
    assert len(predictor.asked) == len(requests) == online.predicted
    finished = [r for r in requests if r.state is RequestState.FINISHED]
    assert len(finished) == len(requests)
    for text, history in predictor.asked:
        handover_s = handover_time_s(by_text[text])
        assert all((by_text[seen].finish_time_s or np.inf) <= handover_s for seen in history)
        assert history == {r.prompt_text for r in finished if (r.finish_time_s or np.inf) < handover_s}
    assert max(len(history) for _, history in predictor.asked) > 100  # the history did grow during the run


def test_latency_shifts_the_hand_over_and_what_the_predictor_has_seen() -> None:
    delayed = requests_with_prompts()
    predictor, _, _ = run_online(delayed, latency_s=0.4)
    for request in delayed:
        assert request.ready_time_s == request.arrival_time_s + 0.4
        first_s = request.first_scheduled_time_s
        assert first_s is not None and first_s >= request.ready_time_s
    # some request saw a finish that happened during its predictor's latency: hand-over, not arrival, counts
    by_text = _by_text(delayed)
    assert any(
        any(request.arrival_time_s <= (by_text[seen].finish_time_s or 0.0) for seen in history)
        for text, history in predictor.asked
        for request in [by_text[text]]
    )


def test_the_prediction_lands_on_the_request_and_in_its_metrics() -> None:
    requests = requests_with_prompts(count=60)
    predictor, _, _ = run_online(requests)
    for request in requests:
        answer = predictor.answers[request.prompt_text or ""]
        assert request.predicted_output == answer
        assert request_metrics(request).attributes["predicted_length"] == pytest.approx(answer.mean)


@pytest.mark.parametrize("policy", ["sjf", "fcfs"])
def test_fast_forward_on_and_off_give_identical_runs(policy: str) -> None:
    runs = []
    for fast_forward in (True, False):
        requests = requests_with_prompts(seed=3, count=200, rate=6.0)
        predictor, _, simulation = run_online(requests, fast_forward=fast_forward, policy=policy)
        token_times = [r.token_times_s().tolist() for r in requests]
        events = sum(i.num_events for i in simulation.instances)
        runs.append((predictor.asked, predictor.seen, token_times, events))
    assert runs[0][:3] == runs[1][:3]
    assert runs[0][3] < runs[1][3]  # it did fast-forward


def test_the_finish_hook_reports_each_finished_request_once_at_its_step() -> None:
    groups: list[list[tuple[str, float | None]]] = []
    requests = random_requests(5, 120, rate=6.0)
    from semsched.latency import load_profile
    from semsched.sim.router import make_router

    instance = Instance(make_scheduler("fcfs"), load_profile("a100-qwen1.5-4b"))
    simulation = Simulation([instance], make_router("round-robin"),
                            on_finish=lambda done: groups.append([(r.request_id, r.finish_time_s) for r in done]))
    result = simulation.run(requests)
    reported = [rid for group in groups for rid, _ in group]
    assert sorted(reported) == sorted(r.request_id for r in result.finished)
    assert len(set(reported)) == len(reported) == len(requests)
    assert all(len({t for _, t in group}) == 1 for group in groups)  # one step, one finish time


def test_every_prompt_is_embedded_once_in_one_call() -> None:
    calls: list[list[str]] = []

    def counting_encode(texts: Sequence[str]) -> npt.NDArray[np.float32]:
        calls.append(list(texts))
        return fake_encode(texts)

    requests = [dataclasses.replace(r, prompt_text=f"prompt {int(r.request_id) % 7}")
                for r in random_requests(1, 40)]
    online = OnlinePrediction.start(RecordingPredictor(), requests, encode=counting_encode)
    assert calls == [[f"prompt {i}" for i in range(7)]]
    assert online.prompts.texts == tuple(r.prompt_text for r in requests)
    assert online.prompts.vectors.shape == (40, DIMENSIONS)


# ---- errors ----------------------------------------------------------------------------------------------
def test_a_request_without_prompt_text_is_named() -> None:
    requests = random_requests(1, 3)
    with pytest.raises(LengthPredictionError, match="request '0' has no prompt text"):
        OnlinePrediction.start(RecordingPredictor(), requests, encode=fake_encode)


def test_a_predictor_that_breaks_its_contract_is_named() -> None:
    class Silent(RecordingPredictor):
        name = "silent"

        def predict(self, prompts: Prompts) -> list[LengthDistribution]:
            return []

    requests = requests_with_prompts(count=2)
    online = OnlinePrediction.start(Silent(), requests, encode=fake_encode)
    with pytest.raises(LengthPredictionError, match="predictor 'silent'.*got 0 items"):
        online.handed_over(requests[0], 0.0)


# ---- specs -----------------------------------------------------------------------------------------------
def test_the_spec_syntax() -> None:
    spec = parse_length_spec("length=semantic-knn;warmup=../data/a.json+../data/b.json")
    assert spec.predictor_spec == "semantic-knn:warmup=../data/a.json+../data/b.json"
    assert spec.latency_s is None and spec.effective_latency_s == DEFAULT_LATENCY_S
    timed = parse_length_spec(" length=semantic-knn ; threshold=0.8; latency_s=0.01 ")
    assert timed.predictor_spec == "semantic-knn:threshold=0.8" and timed.latency_s == 0.01
    assert parse_length_spec(timed.spec) == timed
    assert parse_length_spec("length=histogram").predictor_spec == "histogram"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("length=semantic-knn:threshold=0.8", r"length=semantic-knn;threshold=0\.8"),
        ("length=x;latency_s=abc", "latency_s: 'abc' is not a number"),
        ("length=x;latency_s=-1", "latency_s: must be a number from 0"),
        ("length=x;a=1;a=2", "a given twice"),
        ("length=x;oops", "'oops': must look like key=value"),
        ("warmup=a.json;length=x", "starts with length=NAME"),
        ("length=", "a predictor name"),
    ],
)
def test_bad_specs_name_the_field(text: str, message: str) -> None:
    with pytest.raises(LengthPredictionError, match=message):
        parse_length_spec(text)


# ---- the runner -------------------------------------------------------------------------------------------
@pytest.fixture
def fake_factory(monkeypatch: pytest.MonkeyPatch) -> list[RecordingPredictor]:
    """The runner's predictor factory and embedding replaced by fakes; the predictors it made, in order."""
    made: list[RecordingPredictor] = []

    def factory(spec: str) -> RecordingPredictor:
        assert spec == "recording:knob=1"
        made.append(RecordingPredictor())
        return made[-1]

    monkeypatch.setattr(prediction_module, "predictor_factory", lambda: factory)
    monkeypatch.setattr(prediction_module, "embed_texts", fake_encode)
    return made


def _workload(count: int = 80) -> Workload:
    rng = np.random.default_rng(4)
    arrivals = np.cumsum(rng.exponential(0.2, count))
    workload = Workload.untiered("prompts", arrivals, rng.integers(5, 300, count), rng.integers(1, 200, count))
    return workload.with_prompt_text([f"prompt {i % 30}" for i in range(count)])


def test_each_run_gets_a_fresh_predictor_and_the_same_predictions(fake_factory: list[RecordingPredictor]) -> None:
    spec = parse_length_spec("length=recording;knob=1;latency_s=0.05")
    runs = [run_policy(_workload(), "sjf", ClusterSpec(length_predictor=spec)) for _ in range(2)]
    assert len(fake_factory) == 2 and fake_factory[0] is not fake_factory[1]
    assert fake_factory[0].asked == fake_factory[1].asked
    for run in runs:
        assert all(r.ready_time_s == r.arrival_time_s + 0.05 for r in run.requests)
    assert [r.predicted_output for r in runs[0].requests] == [r.predicted_output for r in runs[1].requests]
    assert all(r.predicted_output is not None for r in runs[0].requests)
    assert len(fake_factory[0].seen) == len(runs[0].result.finished)  # the last finishes were told too


def test_with_a_cost_model_its_batches_decide_the_hand_over(fake_factory: list[RecordingPredictor]) -> None:
    cost = PredictorCost(0.3, 4, "full", max_wait_s=0.5)
    spec = parse_length_spec("length=recording;knob=1")
    workload = _workload()
    run = run_policy(workload, "sjf", ClusterSpec(predictor=cost, length_predictor=spec))
    assert [r.ready_time_s for r in run.requests] == cost.ready_times(workload.arrival_time_s).tolist()
    assert len(fake_factory[0].asked) == len(workload)
    with pytest.raises(LengthPredictionError, match="latency_s: with a predictor cost"):
        ClusterSpec(predictor=cost, length_predictor=LengthPredictorSpec("recording", latency_s=0.1))


def test_a_workload_without_prompts_cannot_predict(fake_factory: list[RecordingPredictor]) -> None:
    workload = Workload.untiered("bare", [0.0, 1.0], [10, 10], [5, 5])
    with pytest.raises(LengthPredictionError, match="no prompt text"):
        run_policy(workload, "fcfs", ClusterSpec(length_predictor=parse_length_spec("length=recording;knob=1")))
    assert fake_factory == []  # refused before a predictor was made


def test_uniform_mix_is_parsed_kept_in_the_spec_and_checked() -> None:
    from semsched.sim.prediction import LengthPredictionError, parse_length_spec

    spec = parse_length_spec("length=semantic-knn;uniform_mix=0.2;threshold=0.7")
    assert spec.uniform_mix == 0.2 and spec.params == (("threshold", "0.7"),)
    assert parse_length_spec(spec.spec) == spec
    with pytest.raises(LengthPredictionError, match="uniform_mix"):
        parse_length_spec("length=semantic-knn;uniform_mix=2")


def test_a_predictor_that_reads_no_text_runs_on_a_trace_without_prompts() -> None:
    from semsched.sim.prediction import parse_length_spec, spec_reads_text

    assert not spec_reads_text(parse_length_spec("length=input-length"))
    assert not spec_reads_text(parse_length_spec("length=histogram;uniform_mix=0.2"))
    assert spec_reads_text(parse_length_spec("length=semantic-knn"))
    rng = np.random.default_rng(3)
    workload = Workload.untiered("bare", np.sort(rng.uniform(0, 20, 60)), rng.integers(10, 400, 60),
                                 rng.integers(1, 300, 60))
    cluster = ClusterSpec(length_predictor=parse_length_spec("length=input-length"))
    run = run_policy(workload, "gittins", cluster)
    assert all(r.predicted_output is not None for r in run.requests)
    # the later requests are predicted from the finished ones: not every prediction is the cold prior
    assert len({r.predicted_output for r in run.requests}) > 1
    with pytest.raises(LengthPredictionError, match="no prompt text"):
        run_policy(workload, "gittins", ClusterSpec(length_predictor=parse_length_spec("length=semantic-knn")))
