"""Engine fixtures for the adapter tests: one default in-process engine per module. (``default_server``, the
default ``vllm serve``, is shared across modules: tests/conftest.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.vllm.harness import running_llm

if TYPE_CHECKING:
    from vllm import LLM


@pytest.fixture(scope="module")
def default_llm(tiny_model_dir: Path) -> Iterator[LLM]:
    """An in-process ``vllm.LLM`` with vLLM's own scheduler and the harness's default sizes, one per module."""
    with running_llm(tiny_model_dir) as llm:
        yield llm

