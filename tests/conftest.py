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

``default_server`` (a ``vllm serve`` with vLLM's own scheduler and the default sizes) is the one engine shared
across modules: it starts when the first test that asks for it runs and stops right after the last one in the
run's order (not at the end of the session: an idle server holds ~2 GB and its engine polls), and the tests that
ask for it run one after another (:func:`pytest_collection_modifyitems`). tests/vllm/test_serve_smoke.py uses it,
and tests/gateway/test_vllm_gateway.py as the second of its two servers.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from contextlib import ExitStack
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
    server tests came from CPU placement, see ``_separate_engine_from_api_server`` in harness.py). Among them,
    those that use the shared ``default_server`` come first, so that it is stopped before the others start theirs;
    the order within each group is the collection order (a module's tests stay in file order)."""
    items.sort(key=lambda item: (0 if item.get_closest_marker("server") else 1, 0 if _uses_default_server(item)
                                 else 1))
    users = [item.nodeid for item in items if _uses_default_server(item)]
    _DefaultServer.last_user = users[-1] if users else None


def _uses_default_server(item: pytest.Item) -> bool:
    return "default_server" in getattr(item, "fixturenames", ())


class _DefaultServer:
    """The session's ``default_server``: started on first use, stopped after :attr:`last_user`'s teardown (and at
    the end of the session at the latest); started again should a later test ask for it."""

    last_user: str | None = None
    running: _DefaultServer | None = None

    def __init__(self, model_dir: Path, log_dir: Path) -> None:
        self.model_dir, self.log_dir = model_dir, log_dir
        self._stack: ExitStack | None = None
        self._url = ""
        self._starts = 0

    def url(self) -> str:
        if self._stack is None:
            from tests.vllm.harness import vllm_server

            self._starts += 1
            stack = ExitStack()
            log_path = self.log_dir / f"server{self._starts}.log"
            self._url = stack.enter_context(vllm_server(self.model_dir, log_path))
            self._stack = stack
        return self._url

    def stop(self) -> None:
        if self._stack is not None:
            stack, self._stack = self._stack, None
            stack.close()


@pytest.fixture(scope="session")
def _default_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[_DefaultServer]:
    server = _DefaultServer(tiny_model_dir, tmp_path_factory.mktemp("vllm-serve"))
    _DefaultServer.running = server
    try:
        yield server
    finally:
        _DefaultServer.running = None
        server.stop()


@pytest.fixture(scope="module")
def default_server(_default_server: _DefaultServer) -> str:
    """The base URL of a ``vllm serve`` with vLLM's own scheduler and the default sizes, shared by every module
    that asks for it (see the module's docstring)."""
    return _default_server.url()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    yield  # after the item's fixtures (and its module's, if it was the module's last test) are torn down
    if _DefaultServer.running is not None and item.nodeid == _DefaultServer.last_user:
        _DefaultServer.running.stop()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight Llama model (2 layers, hidden 128) with the Llama-2 tokenizer, made once per session."""
    from semsched.calibrate.tiny_model import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny-model") / "model")
