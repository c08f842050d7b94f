"""Shared fixtures for the tests that run real vLLM (marked ``vllm``; they run in CI).

Engine fixtures are module-scoped: a module that uses ``default_llm`` or ``default_server`` starts one engine for
all its tests, and it is stopped when the module's last test ends. A module that needs another scheduler or other
sizes writes its own module-scoped fixture around ``running_llm`` or ``vllm_server`` (tests/vllm/harness.py), e.g.

    @pytest.fixture(scope="module")
    def llm(tiny_model_dir: Path) -> Iterator[LLM]:
        with running_llm(tiny_model_dir, scheduler_cls="semsched.vllm.Scheduler",
                         env={"SEMSCHED_POLICY": "priority"}, num_gpu_blocks=16) as engine:
            yield engine

Use one engine fixture per module: two would run at once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.vllm.harness import running_llm, vllm_server

if TYPE_CHECKING:
    from vllm import LLM

# Engines made by vllm.LLM run in-process (no engine-core subprocess) with a small CPU KV cache.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
# Nothing may leave the machine: no usage reports, no model hub look-ups, and the engine's own sockets (engine
# core <-> worker) on loopback rather than on the machine's network address.
os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the ``vllm serve`` tests (marked ``server``) before anything starts an in-process engine, so that no
    engine state of this process can reach a server it starts (a precaution; the late requests once seen in
    server tests came from CPU placement, see ``_separate_engine_from_api_server`` in harness.py)."""
    items.sort(key=lambda item: 0 if item.get_closest_marker("server") else 1)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight Llama model (2 layers, hidden 128) with the Llama-2 tokenizer, made once per session."""
    from semsched.vllm.tiny_model import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny-model") / "model")


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
