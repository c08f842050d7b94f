"""Factories for the online length-predictor tests: prompts from hand-built or random unit vectors, a stand-in
encoder (deterministic random unit vectors per text, no model), and small AlpacaEval-format answer files."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from semsched.predict.online import Prompts


def unit(*values: float) -> npt.NDArray[np.float32]:
    vector = np.asarray(values, dtype=np.float32)
    return np.asarray(vector / np.linalg.norm(vector), dtype=np.float32)


def prompts(vectors: Sequence[npt.NDArray[np.float32]] | npt.NDArray[np.float32],
            prompt_tokens: Sequence[int] | None = None) -> Prompts:
    """Prompts named p0, p1, ... with the given embeddings (and 10 tokens each unless given)."""
    matrix = np.asarray(vectors, dtype=np.float32)
    tokens = np.asarray(prompt_tokens if prompt_tokens is not None else [10] * len(matrix), dtype=np.int64)
    return Prompts(tuple(f"p{i}" for i in range(len(matrix))), tokens, matrix)


def random_units(count: int, dimensions: int, seed: int) -> npt.NDArray[np.float32]:
    rows = np.random.default_rng(seed).normal(size=(count, dimensions))
    return np.asarray(rows / np.linalg.norm(rows, axis=1, keepdims=True), dtype=np.float32)


class FakeEncoder:
    """Each text -> a random unit vector seeded by its hash: equal texts embed equally, different texts are nearly
    orthogonal (cosine ~0 in 384 dimensions). Counts the texts it was asked for."""

    def __init__(self, dimensions: int = 384, *args: object, **kwargs: object) -> None:
        self.dimensions = dimensions
        self.calls = 0

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        rows = [np.random.default_rng(int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little"))
                .normal(size=self.dimensions) for t in texts]
        matrix = np.asarray(rows, dtype=np.float64).reshape(len(texts), self.dimensions)
        return np.asarray(matrix / np.linalg.norm(matrix, axis=1, keepdims=True), dtype=np.float32)


def write_alpaca_file(path: Path, rows: Sequence[tuple[str, str]], generator: str = "test-model") -> Path:
    """An AlpacaEval ``model_outputs.json`` with (instruction, output) rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([{"instruction": i, "output": o, "generator": generator, "dataset": "test"}
                                for i, o in rows]))
    return path
