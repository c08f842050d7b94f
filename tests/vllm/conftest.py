"""Engine fixtures for the adapter tests: one default in-process engine or server per module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.vllm.harness import running_llm, vllm_server

if TYPE_CHECKING:
    from vllm import LLM


@pytest.fixture(scope="module")
def default_llm(tiny_model_dir: Path) -> Iterator[LLM]:
    """An in-process ``vllm.LLM`` with vLLM's own scheduler and the harness's default sizes, one per module."""
    with running_llm(tiny_model_dir) as llm:
        yield llm


@pytest.fixture(scope="module")
def default_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a ``vllm serve`` with vLLM's own scheduler and the default sizes, one per module."""
    log_path = tmp_path_factory.mktemp("vllm-serve") / "server.log"
    with vllm_server(tiny_model_dir, log_path) as base_url:
        yield base_url
