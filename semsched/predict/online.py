"""The contract of an *online* output-length predictor (issue 16, seed 002 §3.1).

An online predictor learns while the system serves: it predicts a distribution for each arriving prompt from
what it has seen, and it is told the real output length of each request once that request has *finished*
(``observe``), never before. The simulator and the ``semsched lengths eval`` command drive every predictor
through this one protocol, so a predictor never knows which of them calls it.

Prompts arrive as :class:`Prompts`: the text, its token count and its sentence embedding (all-MiniLM-L6-v2,
L2-normalised, one row per prompt). Callers embed a whole workload once, in batches (the embedding model's
forward pass is the expensive part, timed and reported separately), and hand predictors the rows they need.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from semsched.core.request import LengthDistribution


@dataclass(frozen=True)
class Prompts:
    """A batch of prompts: ``texts[i]`` has ``prompt_tokens[i]`` tokens and embedding ``vectors[i]`` (float32,
    L2-normalised rows; shape ``(len(texts), dimensions)``)."""

    texts: tuple[str, ...]
    prompt_tokens: npt.NDArray[np.int64]
    vectors: npt.NDArray[np.float32]

    def __post_init__(self) -> None:
        if not len(self.texts) == len(self.prompt_tokens) == len(self.vectors):
            raise ValueError(
                f"Prompts: texts, prompt_tokens and vectors must be equally long (got {len(self.texts)}, "
                f"{len(self.prompt_tokens)} and {len(self.vectors)})"
            )

    def __len__(self) -> int:
        return len(self.texts)

    def take(self, indices: Sequence[int] | npt.NDArray[np.int64]) -> Prompts:
        chosen = np.asarray(indices, dtype=np.int64)
        return Prompts(tuple(self.texts[i] for i in chosen), self.prompt_tokens[chosen], self.vectors[chosen])


class OnlineLengthPredictor(Protocol):
    """Predicts output-length distributions and learns from finished requests."""

    @property
    def name(self) -> str:
        """Short name used in reports and specs (``semantic-knn``, ``histogram``, ...)."""
        ...

    def predict(self, prompts: Prompts) -> list[LengthDistribution]:
        """One distribution per prompt, from what was observed so far."""
        ...

    def observe(self, prompts: Prompts, output_tokens: npt.NDArray[np.int64]) -> None:
        """Learn the real output lengths of finished requests (in finishing order)."""
        ...
