"""An urgency classifier for emergency triage texts (issue 15, seed 000's urgency predictor, trained on real data).

Inputs are what is known at triage (:mod:`semsched.predict.ktas`): the chief complaint as free text (word 1-2
gram TF-IDF), the vital signs, age and pain score (median-imputed with missing-value indicators, standardised)
and the coded fields (one-hot). A multinomial logistic regression gives a probability per KTAS level.

**The under-triage threshold.** Under-triage (a predicted level less urgent than the truth) is the costly error
in emergency care. The classifier predicts the most urgent level ``k`` whose cumulative probability
``P(level <= k)`` reaches ``threshold``: at 0.5 that is the median of the predicted distribution; lower values
predict more urgent levels, trading over-triage for less under-triage. :func:`cross_validate` measures every
threshold on held-out folds.

``text="embedding"`` replaces the TF-IDF of the complaint with its all-MiniLM-L6-v2 sentence embedding
(:mod:`semsched.predict.embed`, the ``[embed]`` extra). On the shared KTAS file both reach about the same held-out
accuracy (docs/predictors.md), so TF-IDF, which needs no model, is the default.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import joblib
import numpy as np
from sklearn.compose import ColumnTransformer
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import FunctionTransformer, OneHotEncoder, StandardScaler

from semsched.core.errors import SemschedError
from semsched.predict.ktas import CATEGORICAL_COLUMNS, NUM_LEVELS, NUMERIC_COLUMNS, TriageRecords

TextFeatures = Literal["tfidf", "embedding"]
TEXT_FEATURES: tuple[TextFeatures, ...] = ("tfidf", "embedding")

LEVELS = np.arange(1, NUM_LEVELS + 1)
DEFAULT_THRESHOLD = 0.35
MODEL_FILE, META_FILE = "model.joblib", "model.json"
FORMAT_VERSION = 2


class UrgencyModelError(SemschedError):
    """A model directory cannot be used (missing, or written by another format); the message says which."""


@dataclass(frozen=True)
class TriageMetrics:
    """Agreement of predicted levels with the true ones: accuracy, macro-F1 over the levels present, and the
    shares predicted less urgent (under-triage) and more urgent (over-triage) than the truth."""

    n: int
    accuracy: float
    macro_f1: float
    under_triage_rate: float
    over_triage_rate: float


def triage_metrics(true: np.ndarray, predicted: np.ndarray) -> TriageMetrics:
    true, predicted = np.asarray(true), np.asarray(predicted)
    return TriageMetrics(
        n=int(true.size),
        accuracy=float(np.mean(predicted == true)),
        macro_f1=float(f1_score(true, predicted, average="macro", labels=np.unique(true))),
        under_triage_rate=float(np.mean(predicted > true)),
        over_triage_rate=float(np.mean(predicted < true)),
    )


def levels_at(probabilities: np.ndarray, threshold: float) -> np.ndarray:
    """The most urgent level whose cumulative probability reaches ``threshold``, per row."""
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
    cumulative = np.cumsum(probabilities, axis=1)
    return np.asarray(LEVELS[np.argmax(cumulative >= threshold - 1e-12, axis=1)])


def _as_float(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)


def _features(records: TriageRecords, text: TextFeatures, *, cache: bool = True) -> np.ndarray:
    """One object row per record: the complaint (or its embedding), the numeric inputs, the coded inputs."""
    num_coded = len(CATEGORICAL_COLUMNS)
    coded = np.asarray(records.categorical, dtype=object).reshape(len(records), num_coded)
    if text == "embedding":
        from semsched.predict.embed import Embedder

        complaint = Embedder(cache=cache).encode(records.complaints).astype(object)
    else:
        complaint = np.asarray(records.complaints, dtype=object).reshape(-1, 1)
    return np.hstack([complaint, records.numeric.astype(object), coded])


def _pipeline(c: float, seed: int, text: TextFeatures) -> Pipeline:
    num_numeric, num_coded = len(NUMERIC_COLUMNS), len(CATEGORICAL_COLUMNS)
    width = 384 if text == "embedding" else 1
    numeric = list(range(width, width + num_numeric))
    coded = list(range(width + num_numeric, width + num_numeric + num_coded))
    complaint: Any = (
        make_pipeline(FunctionTransformer(_as_float), StandardScaler()) if text == "embedding"
        else TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)
    )
    features = ColumnTransformer([
        ("complaint", complaint, list(range(width)) if text == "embedding" else 0),
        ("numeric", make_pipeline(FunctionTransformer(_as_float), SimpleImputer(strategy="median",
                                                                                add_indicator=True),
                                  StandardScaler()), numeric),
        ("coded", OneHotEncoder(handle_unknown="ignore"), coded),
    ])
    classifier = LogisticRegression(C=c, max_iter=5000, class_weight="balanced", random_state=seed)
    return Pipeline([("features", features), ("classifier", classifier)])


class UrgencyClassifier:
    """Triage records -> KTAS level probabilities -> levels at an under-triage ``threshold``."""

    def __init__(self, threshold: float = DEFAULT_THRESHOLD, c: float = 3.0, seed: int = 0,
                 text: TextFeatures = "tfidf") -> None:
        levels_at(np.ones((1, NUM_LEVELS)) / NUM_LEVELS, threshold)  # checks the threshold
        _check_settings(c, text)
        self.threshold, self.c, self.seed, self.text = threshold, c, seed, text
        self._pipeline: Pipeline | None = None
        self.metadata: dict[str, Any] = {}

    def fit(self, records: TriageRecords) -> UrgencyClassifier:
        self._pipeline = _pipeline(self.c, self.seed, self.text).fit(_features(records, self.text), records.expert)
        return self

    def predict_proba(self, records: TriageRecords, *, cache: bool = True) -> np.ndarray:
        """Probability of each level 1..5 per record (a level never seen in training gets 0). ``cache=False``
        embeds the complaints afresh (what a live predictor pays)."""
        if self._pipeline is None:
            raise UrgencyModelError("the classifier is not trained: call fit() or load a model directory")
        seen = self._pipeline.predict_proba(_features(records, self.text, cache=cache))
        probabilities = np.zeros((len(records), NUM_LEVELS))
        probabilities[:, np.asarray(self._pipeline.classes_) - 1] = seen
        return probabilities

    def predict(self, records: TriageRecords) -> np.ndarray:
        return levels_at(self.predict_proba(records), self.threshold)

    def save(self, directory: str | Path) -> Path:
        """Write the model and its settings (and ``metadata``, e.g. cross-validation figures) to ``directory``."""
        if self._pipeline is None:
            raise UrgencyModelError("the classifier is not trained: nothing to save")
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        joblib.dump(self._pipeline, out / MODEL_FILE)
        meta = {"format": FORMAT_VERSION, "threshold": self.threshold, "c": self.c, "seed": self.seed,
                "text": self.text, **self.metadata}
        (out / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        return out

    @classmethod
    def load(cls, directory: str | Path) -> UrgencyClassifier:
        source = Path(directory)
        if not (source / MODEL_FILE).is_file() or not (source / META_FILE).is_file():
            raise UrgencyModelError(f"{source}: not an urgency model directory (it needs {MODEL_FILE} and "
                                    f"{META_FILE}; `semsched urgency train` writes one)")
        meta = json.loads((source / META_FILE).read_text())
        if meta.get("format") != FORMAT_VERSION:
            raise UrgencyModelError(f"{source}: model format {meta.get('format')!r}, this semsched reads "
                                    f"{FORMAT_VERSION}: train it again")
        model = cls(threshold=meta["threshold"], c=meta["c"], seed=meta["seed"], text=meta["text"])
        model._pipeline = joblib.load(source / MODEL_FILE)
        model.metadata = {k: v for k, v in meta.items() if k not in {"format", "threshold", "c", "seed", "text"}}
        return model


def _check_settings(c: float, text: str) -> None:
    if not c > 0:
        raise ValueError(f"c (inverse regularisation) must be > 0, got {c!r}")
    if text not in TEXT_FEATURES:
        raise ValueError(f"text must be one of {', '.join(TEXT_FEATURES)}, got {text!r}")


def out_of_fold_probabilities(records: TriageRecords, *, folds: int = 5, c: float = 3.0, seed: int = 0,
                              text: TextFeatures = "tfidf") -> np.ndarray:
    """(n, 5) level probabilities, each row from a model trained on the other folds (stratified by level)."""
    _check_settings(c, text)
    if isinstance(folds, bool) or not isinstance(folds, int) or not 2 <= folds <= len(records):
        raise ValueError(f"folds must be an integer from 2 to the number of records ({len(records)}), "
                         f"got {folds!r}")
    features, labels = _features(records, text), records.expert
    probabilities = np.zeros((len(records), NUM_LEVELS))
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    for train, test in splitter.split(features, labels):
        pipeline = _pipeline(c, seed, text).fit(features[train], labels[train])
        probabilities[np.ix_(test, np.asarray(pipeline.classes_) - 1)] = pipeline.predict_proba(features[test])
    return probabilities


def cross_validate(records: TriageRecords, thresholds: Sequence[float], *, folds: int = 5, c: float = 3.0,
                   seed: int = 0, text: TextFeatures = "tfidf") -> dict[float, TriageMetrics]:
    """Held-out metrics at each threshold, from one set of out-of-fold probabilities."""
    probabilities = out_of_fold_probabilities(records, folds=folds, c=c, seed=seed, text=text)
    return {t: triage_metrics(records.expert, levels_at(probabilities, t)) for t in thresholds}


def cross_val_levels(records: TriageRecords, *, threshold: float | None = None, folds: int = 5,
                     seed: int = 0) -> np.ndarray:
    """Out-of-fold predicted KTAS levels 1..5 (no row predicted by a model that saw it): the classifier's
    labels for a workload built from the same file (``ktas-ed:urgency=predicted``)."""
    probabilities = out_of_fold_probabilities(records, folds=folds, seed=seed)
    return levels_at(probabilities, DEFAULT_THRESHOLD if threshold is None else threshold)


@dataclass(frozen=True)
class PredictionCost:
    """What predicting costs at one batch size: seconds per batch (median of the repeats) and per request."""

    batch_size: int
    seconds_per_batch: float
    seconds_per_request: float


def measure_cost(model: UrgencyClassifier, records: TriageRecords, batch_sizes: Sequence[int] = (1, 4, 16, 64),
                 *, repeats: int = 5) -> list[PredictionCost]:
    """Time ``predict_proba`` (features, embedding included and uncached, and classification) per batch size:
    one warm-up batch, then ``repeats`` batches of different rows (reused cyclically)."""
    if not batch_sizes or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in batch_sizes):
        raise ValueError(f"batch_sizes must be integers >= 1, got {list(batch_sizes)!r}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    results, cursor = [], 0
    for size in batch_sizes:
        seconds = []
        for attempt in range(repeats + 1):
            batch = records.subset([(cursor + k) % len(records) for k in range(size)])
            cursor += size
            start = time.perf_counter()
            model.predict_proba(batch, cache=False)
            if attempt:  # the first batch of a size warms up
                seconds.append(time.perf_counter() - start)
        per_batch = float(np.median(seconds))
        results.append(PredictionCost(size, per_batch, per_batch / size))
    return results


def metrics_dict(metrics: TriageMetrics, prefix: str = "") -> dict[str, float | int]:
    return {f"{prefix}{key}": value for key, value in asdict(metrics).items()}
