"""Online output-length prediction inside a simulated run (issue 16, seed 002 §3.1).

An online predictor (:class:`~semsched.predict.online.OnlineLengthPredictor`) learns while the system serves. In a
run, :class:`OnlinePrediction` drives one such predictor, made fresh for the run, so that it sees exactly what it
would see in a real deployment:

* every prompt of the run is embedded once, up front, in one batched call (each distinct text once; the
  embedding model's forward pass is the expensive part and is not repeated per request);
* a request's prediction is made at its hand-over (:func:`semsched.sim.engine.handover_time_s`): its arrival
  plus the predictor's latency ``latency_s`` (:func:`apply_latency`), or, when the cluster also has a
  :class:`~semsched.predict.cost.PredictorCost`, the ready time that cost model gives (its batches then decide
  the delay, and ``latency_s`` may not be given). The distribution lands on ``Request.predicted_output`` before
  the request reaches the router, so the scheduler keys it with the prediction;
* the predictor's history at that moment holds exactly the requests that FINISHED strictly before it: the
  simulator reports finishes after each step (:class:`~semsched.sim.engine.Simulation`'s ``on_finish``), and
  they are passed to ``observe`` in one batch just before the next prediction, ordered by finish time and then
  by the request's position in the run (so the order never depends on how events at one instant were
  sequenced, and both fast-forward modes feed the predictor identically). Rejected and dropped requests are
  never observed: their output length is never known.

Deterministic: the same workload, seed and predictor spec give the same predictions.

Specs. A length predictor is named on the command line as ``length=NAME;key=value;...`` (``--predictor``, which
also takes a cost spec ``immediate:...``/``full:...``): ``latency_s=S`` is the per-request latency charged here
(default :data:`DEFAULT_LATENCY_S`), ``uniform_mix=W`` mixes every prediction with a uniform distribution with
weight ``W`` (Fig. 11's noise, :mod:`semsched.predict.noise`); every other ``key=value`` goes to the factory as
``NAME:key=value;...``, e.g. ``length=semantic-knn;warmup=PATH;threshold=0.8`` makes
``semantic-knn:warmup=PATH;threshold=0.8``. The factory is resolved in one place, :func:`predictor_factory`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from semsched.core.errors import SemschedError
from semsched.core.request import LengthDistribution, Request
from semsched.predict.cost import MAX_SECONDS
from semsched.predict.online import OnlineLengthPredictor, Prompts

LENGTH_KEY = "length"
"""The first key of a length-predictor spec: ``length=NAME``."""
LATENCY_KEY = "latency_s"
NOISE_KEY = "uniform_mix"
DEFAULT_LATENCY_S = 0.0005
"""Per-request latency charged when a spec gives none: 0.5 ms, a nearest-neighbour look-up over the history of a
prompt whose embedding is computed with the request's own (already batched) forward pass."""
EXAMPLE_SPEC = "length=semantic-knn;warmup=PATH"

Encoder = Callable[[Sequence[str]], npt.NDArray[np.float32]]
"""``texts -> (len(texts), dimensions)`` float32, L2-normalised rows."""


class LengthPredictionError(SemschedError):
    """A length-predictor spec is invalid, its predictor cannot be made, or a run cannot predict (no prompt text,
    a predictor that breaks its contract); the message names the field or the request."""


# ---- specs -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LengthPredictorSpec:
    """Which online length predictor a run uses: the factory's ``name`` and ``params`` (in the order given), and
    the per-request ``latency_s`` (None: :data:`DEFAULT_LATENCY_S`, or the cost model's batches when the cluster
    has one)."""

    name: str
    params: tuple[tuple[str, str], ...] = ()
    latency_s: float | None = None
    #: Fig. 11's noise: each prediction mixed with a uniform distribution with this weight
    #: (:class:`~semsched.predict.noise.UniformMix`; None: none)
    uniform_mix: float | None = None

    def __post_init__(self) -> None:
        if not self.name or any(c in self.name for c in ":;= "):
            raise LengthPredictionError(f"{LENGTH_KEY}: a predictor name, without ':', ';', '=' or spaces "
                                        f"(got {self.name!r}; e.g. {EXAMPLE_SPEC})")
        keys = [key for key, _ in self.params]
        if len(set(keys)) != len(keys) or {LATENCY_KEY, LENGTH_KEY, NOISE_KEY} & set(keys):
            raise LengthPredictionError(
                f"params: each key once, and not {LENGTH_KEY}, {LATENCY_KEY} or {NOISE_KEY} (got {keys})"
            )
        mix = self.uniform_mix
        if mix is not None and (isinstance(mix, bool) or not isinstance(mix, int | float)
                                or not math.isfinite(mix) or not 0.0 <= mix <= 1.0):
            raise LengthPredictionError(f"{NOISE_KEY}: must be a number from 0 to 1 (got {mix!r})")
        value = self.latency_s
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or not math.isfinite(value) or not 0.0 <= value <= MAX_SECONDS):
            raise LengthPredictionError(f"{LATENCY_KEY}: must be a number from 0 to {MAX_SECONDS:g} s "
                                        f"(got {value!r})")

    @property
    def predictor_spec(self) -> str:
        """What the predictor factory is given: ``NAME`` or ``NAME:key=value;key=value``."""
        if not self.params:
            return self.name
        return f"{self.name}:" + ";".join(f"{key}={value}" for key, value in self.params)

    @property
    def spec(self) -> str:
        """The spec that gives this setting back through :func:`parse_length_spec` (for run descriptions)."""
        items = [f"{LENGTH_KEY}={self.name}", *(f"{key}={value}" for key, value in self.params)]
        if self.latency_s is not None:
            items.append(f"{LATENCY_KEY}={self.latency_s!r}")
        if self.uniform_mix is not None:
            items.append(f"{NOISE_KEY}={self.uniform_mix!r}")
        return ";".join(items)

    @property
    def effective_latency_s(self) -> float:
        return DEFAULT_LATENCY_S if self.latency_s is None else float(self.latency_s)


def is_length_spec(text: str) -> bool:
    """Whether ``text`` names a length predictor (``length=...``) rather than a predictor cost mode."""
    key, sep, _ = text.strip().partition("=")
    return bool(sep) and key.strip() == LENGTH_KEY


def parse_length_spec(text: str) -> LengthPredictorSpec:
    """A :class:`LengthPredictorSpec` from ``length=NAME;key=value;...`` (module docstring); a bad spec is a
    :class:`LengthPredictionError` naming the field."""
    items = [item.strip() for item in text.strip().split(";") if item.strip()]
    pairs: list[tuple[str, str]] = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise LengthPredictionError(f"{item!r}: must look like key=value (e.g. {EXAMPLE_SPEC})")
        pairs.append((key.strip(), value.strip()))
    if not pairs or pairs[0][0] != LENGTH_KEY:
        raise LengthPredictionError(f"a length predictor spec starts with {LENGTH_KEY}=NAME (e.g. {EXAMPLE_SPEC})")
    name = pairs[0][1]
    if ":" in name:
        raise LengthPredictionError(
            f"{LENGTH_KEY}={name}: give the predictor's parameters as ';'-separated key=value after its name "
            f"(e.g. {LENGTH_KEY}={name.partition(':')[0]};{name.partition(':')[2]})"
        )
    params: dict[str, str] = {}
    for key, value in pairs[1:]:
        if key in params or key == LENGTH_KEY:
            raise LengthPredictionError(f"{LENGTH_KEY}={name}: {key} given twice")
        params[key] = value
    latency_text = params.pop(LATENCY_KEY, None)
    noise_text = params.pop(NOISE_KEY, None)
    return LengthPredictorSpec(name, tuple(params.items()), _latency(name, latency_text), _noise(name, noise_text))


def _latency(name: str, text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise LengthPredictionError(f"{LENGTH_KEY}={name}: {LATENCY_KEY}: {text!r} is not a number") from None
    if not math.isfinite(value) or not 0.0 <= value <= MAX_SECONDS:
        raise LengthPredictionError(
            f"{LENGTH_KEY}={name}: {LATENCY_KEY}: must be a number from 0 to {MAX_SECONDS:g} s (got {text})"
        )
    return value


def _noise(name: str, text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise LengthPredictionError(f"{LENGTH_KEY}={name}: {NOISE_KEY}: {text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise LengthPredictionError(f"{LENGTH_KEY}={name}: {NOISE_KEY}: must be a number from 0 to 1 (got {text})")
    return value


# ---- making a predictor and embeddings -------------------------------------------------------------------
def predictor_factory() -> Callable[[str], OnlineLengthPredictor]:
    """The factory of the online length predictors, ``spec -> predictor``: the one place the simulator finds
    them (:func:`semsched.predict.length_registry.make_length_predictor`, imported when first needed: it brings
    the embedding model's packages)."""
    from semsched.predict.length_registry import make_length_predictor as factory

    return factory


def make_length_predictor(spec: LengthPredictorSpec) -> OnlineLengthPredictor:
    """A fresh predictor for ``spec`` (one per run: it learns during the run); errors name the spec."""
    factory = predictor_factory()
    try:
        predictor = factory(spec.predictor_spec)
    except SemschedError as error:
        raise LengthPredictionError(f"{LENGTH_KEY}={spec.name}: {error}") from None
    if spec.uniform_mix is None:
        return predictor
    from semsched.predict.noise import UniformMix

    return UniformMix(predictor, spec.uniform_mix)


def embed_texts(texts: Sequence[str]) -> npt.NDArray[np.float32]:
    """all-MiniLM-L6-v2 embeddings of ``texts`` (:class:`semsched.predict.embed.Embedder`, cached on disk)."""
    from semsched.predict.embed import Embedder  # sentence-transformers: loaded only when a run predicts

    return np.asarray(Embedder().encode(list(texts)), dtype=np.float32)


def apply_latency(requests: Sequence[Request], latency_s: float) -> None:
    """Each request is handed over ``latency_s`` after its arrival (its ``ready_time_s``; one already there is
    replaced): a predictor that takes ``latency_s`` per request and never queues."""
    for request in requests:
        request.ready_time_s = request.arrival_time_s + latency_s


# ---- one run's prediction --------------------------------------------------------------------------------
class OnlinePrediction:
    """Drives one fresh predictor through one run (module docstring): give :meth:`handed_over` as the
    simulation's ``on_handover`` and :meth:`finished` as its ``on_finish``.

    ``requests[i]`` has prompt ``prompts[i]``; ``observed`` counts the requests the predictor was told about,
    ``predicted`` the predictions made."""

    def __init__(self, predictor: OnlineLengthPredictor, requests: Sequence[Request], prompts: Prompts) -> None:
        if len(prompts) != len(requests):
            raise LengthPredictionError(f"prompts: {len(prompts)} given for {len(requests)} requests")
        self.predictor = predictor
        self.prompts = prompts
        self._rows = {request.request_id: row for row, request in enumerate(requests)}
        if len(self._rows) != len(requests):
            raise LengthPredictionError("requests: every request id must be unique")
        self._pending: list[Request] = []
        self.observed = 0
        self.predicted = 0

    @classmethod
    def start(
        cls, predictor: OnlineLengthPredictor, requests: Sequence[Request], *, encode: Encoder | None = None
    ) -> OnlinePrediction:
        """Embed every request's prompt text in one call of ``encode`` (default :func:`embed_texts`), each
        distinct text once; for a predictor that reads no text (:func:`reads_text`), nothing is embedded and a
        request needs no prompt text."""
        prompt_tokens = np.fromiter((r.prompt_tokens for r in requests), dtype=np.int64, count=len(requests))
        if not reads_text(predictor):
            blank = tuple(request.prompt_text or "" for request in requests)
            no_vectors = np.zeros((len(requests), 1), dtype=np.float32)
            return cls(predictor, requests, Prompts(blank, prompt_tokens, no_vectors))
        texts = [_prompt_text(request) for request in requests]
        distinct = list(dict.fromkeys(texts))
        vectors = np.asarray((encode or embed_texts)(distinct), dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(distinct):
            raise LengthPredictionError(
                f"encode: must give one row per text ({len(distinct)}), got shape {vectors.shape}"
            )
        position = {text: i for i, text in enumerate(distinct)}
        rows = np.fromiter((position[text] for text in texts), dtype=np.int64, count=len(texts))
        return cls(predictor, requests, Prompts(tuple(texts), prompt_tokens, vectors[rows]))

    def handed_over(self, request: Request, now_s: float) -> None:
        """Predict ``request``'s output length from the requests that finished before ``now_s``."""
        self.flush()
        row = self._row(request)
        distributions = self.predictor.predict(self.prompts.take([row]))
        if len(distributions) != 1 or not isinstance(distributions[0], LengthDistribution):
            raise LengthPredictionError(
                f"predictor {self.predictor.name!r}: predict must give one LengthDistribution per prompt "
                f"(got {len(distributions)} items for 1 prompt)"
            )
        request.predicted_output = distributions[0]
        self.predicted += 1

    def finished(self, requests: Sequence[Request]) -> None:
        """Requests that have just FINISHED; the predictor is told before its next prediction."""
        self._pending.extend(requests)

    def flush(self) -> None:
        """Tell the predictor about every finished request it has not seen yet (finish time, then run order)."""
        if not self._pending:
            return
        pending = sorted(self._pending, key=lambda r: (r.finish_time_s or 0.0, self._row(r)))
        self._pending = []
        rows = [self._row(request) for request in pending]
        outputs = np.fromiter((r.num_output_tokens for r in pending), dtype=np.int64, count=len(pending))
        self.predictor.observe(self.prompts.take(rows), outputs)
        self.observed += len(pending)

    def _row(self, request: Request) -> int:
        row = self._rows.get(request.request_id)
        if row is None:
            raise LengthPredictionError(f"request {request.request_id!r} is not one of this run's requests")
        return row


def _prompt_text(request: Request) -> str:
    if request.prompt_text is None:
        raise LengthPredictionError(
            f"request {request.request_id!r} has no prompt text: online length prediction reads prompts "
            "(workloads alpaca-eval, mt-bench, mixed or ktas-ed carry them)"
        )
    return request.prompt_text


def start_prediction(
    spec: LengthPredictorSpec, requests: Sequence[Request], *, encode: Encoder | None = None
) -> OnlinePrediction:
    """A fresh predictor for ``spec`` driven over ``requests`` (their prompts embedded now)."""
    if requests and spec_reads_text(spec):
        _prompt_text(requests[0])  # a workload without prompts fails before the predictor is made
    return OnlinePrediction.start(make_length_predictor(spec), requests, encode=encode)


def reads_text(predictor: OnlineLengthPredictor) -> bool:
    """Whether ``predictor`` reads prompt texts (their embeddings); False for one that declares ``reads_text =
    False`` (``input-length``, ``histogram``: prompt lengths or nothing), also under a noise wrapper."""
    inner = getattr(predictor, "predictor", None)
    if inner is not None and not reads_text(inner):
        return False
    return bool(getattr(predictor, "reads_text", True))


def spec_reads_text(spec: LengthPredictorSpec) -> bool:
    """:func:`reads_text` of the predictor ``spec`` names, from its class (nothing is built); True for a name the
    registry does not know (the factory, which may be another, names it when it builds one)."""
    from semsched.predict.length_registry import predictor_class

    try:
        return bool(getattr(predictor_class(spec.name), "reads_text", True))
    except SemschedError:
        return True
