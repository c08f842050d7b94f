"""Shared settings and fixtures for the tests that run real vLLM (marked ``vllm``; they run in CI).

This file holds what both the adapter tests (tests/vllm) and the calibration tests (tests/calibrate) need:
the environment every engine runs in and the tiny model. The engine fixtures are in tests/vllm/conftest.py.

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
from pathlib import Path

import pytest

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
    from semsched.calibrate.tiny_model import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny-model") / "model")
