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

``./dev test`` runs the tests on 2 pytest-xdist workers (``-n 2``; ``-n 0``: one process). A module runs whole on
one worker, so the above holds per worker; the modules with a ``vllm serve`` test run on one worker while the
other waits, and the modules sharing a session fixture's work share a worker (:data:`MODULE_GROUPS`: a new such
module goes there).
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the ``vllm serve`` tests (marked ``server``) before anything starts an in-process engine, so that no
    engine state of this process can reach a server it starts (a precaution; the late requests once seen in
    server tests came from CPU placement, see ``_separate_engine_from_api_server`` in harness.py). Among them,
    those that use the shared ``default_server`` come first, so that it is stopped before the others start theirs;
    the order within each group is the collection order (a module's tests stay in file order).

    Then checks :data:`MODULE_GROUPS`, and in a pytest-xdist worker orders the tests for the workers."""
    items.sort(key=lambda item: (0 if item.get_closest_marker("server") else 1, 0 if _uses_default_server(item)
                                 else 1))
    users = [item for item in items if _uses_default_server(item)]
    _DefaultServer.last_user = users[-1] if users else None
    _check_module_groups(items)
    if hasattr(config, "workerinput"):
        # the server group first (the precaution above), then the long groups, longest first; a stable sort keeps
        # the order above within each group
        items.sort(key=lambda item: (_group_of(_module_of(item)) != SERVER_GROUP,
                                     -LONG_GROUPS_S.get(_group_of(_module_of(item)), 0)))


# ---- several workers (pytest-xdist: `./dev test` passes -n 2; pyproject's addopts --dist loadfile) ----
# A group of tests runs whole on one worker, in the order above. A group is a test module (so a module's engine
# fixture starts once), except for the modules that MODULE_GROUPS names. The groups are handed out in the order of
# the tests: the server group first, then the longest (LONG_GROUPS_S). xdist's own --dist loadgroup cannot be used:
# with pytest 9.2 it ignores xdist_group marks (pytest-dev/pytest-xdist#1386); the workers' scheduler is
# pytest_xdist_make_scheduler below.

#: The group of every module with a ``vllm serve`` test (marked ``server``): one worker runs them all, first, so
#: that ``default_server`` starts once and stops after its last user, and the precaution above holds there.
SERVER_GROUP = "vllm-serve"
#: The group of the modules that use ``quick_reports`` (tests/experiments/conftest.py): each experiment's
#: ``--quick`` run is made once in a session, so the modules that share one run on one worker.
QUICK_REPORTS_GROUP = "experiments-quick-reports"
#: Modules that share a worker, by module (any other module is a group of its own). A ``server`` module or a module
#: using ``quick_reports`` that is missing here stops the run (:func:`_check_module_groups`).
MODULE_GROUPS = {
    "tests/gateway/test_vllm_gateway.py": SERVER_GROUP,
    "tests/vllm/test_serve.py": SERVER_GROUP,
    "tests/vllm/test_serve_smoke.py": SERVER_GROUP,
    **{f"tests/experiments/test_{name}.py": QUICK_REPORTS_GROUP
       for name in ("laps_sd", "prefix", "proserve", "reproduce", "sagesched", "scoreboard", "semantic", "tiers")},
}
#: The longest groups, with their seconds in a serial run on the 2-core CI machine (2,632 tests in 679 s): they are
#: handed out first, longest first, so that no worker is left running a long one at the end. Only the order
#: depends on these numbers; the groups not named here follow in collection order.
LONG_GROUPS_S = {
    SERVER_GROUP: 155,  # first in any case (it runs alone)
    "tests/benchmarks/test_scripts.py": 76,
    QUICK_REPORTS_GROUP: 72,
    "tests/calibrate/test_fidelity.py": 59,
    "tests/gateway/test_shared_state.py": 40,
    "tests/gateway/test_gateway.py": 31,
    "tests/vllm/test_engine.py": 21,
    "tests/test_compiled.py": 20,
    "tests/calibrate/test_profiling.py": 16,
    "tests/vllm/test_engine_urgent.py": 12,
    "tests/vllm/test_engine_tiered.py": 11,
}


def _module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _group_of(module: str) -> str:
    return MODULE_GROUPS.get(module, module)


def _check_module_groups(items: list[pytest.Item]) -> None:
    for item in items:
        module = _module_of(item)
        if item.get_closest_marker("server") and _group_of(module) != SERVER_GROUP:
            raise pytest.UsageError(f"{module} has server tests: add it to MODULE_GROUPS (tests/conftest.py) as "
                                    "SERVER_GROUP")
        if "quick_reports" in getattr(item, "fixturenames", ()) and _group_of(module) != QUICK_REPORTS_GROUP:
            raise pytest.UsageError(f"{module} uses quick_reports: add it to MODULE_GROUPS (tests/conftest.py) as "
                                    "QUICK_REPORTS_GROUP")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadfile``: xdist's scheduler by file, with the groups of :data:`MODULE_GROUPS`, handing the
    groups out in the order of the workers' collection (see above) rather than by their number of tests, and
    running :data:`SERVER_GROUP` alone.

    Alone: while the server group runs, the other workers wait (the worker running it is handed its next group,
    which starts after it). Its tests compare latencies measured on servers that share the 2 cores with the test
    process (the gateway's urgent-request TTFT against a target from the same run): with a second worker busy
    beside them, the gateway, starved of CPU, once missed its target (4.78 s against 4.34 s)."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class GroupScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group_of(super()._split_scope(nodeid))

        def _alone_running(self) -> bool:
            return any(not all(work.get(SERVER_GROUP, {}).values()) for work in self.assigned_work.values())

        def _assign_work_unit(self, node: Any) -> None:
            if self._alone_running() and SERVER_GROUP not in self.assigned_work.get(node, {}):
                return  # handed out again when the server group is done (mark_test_complete)
            super()._assign_work_unit(node)

        def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
            running = self._alone_running()
            super().mark_test_complete(node, item_index, duration)
            if running and not self._alone_running():
                for other in self.nodes:
                    if other is not node:
                        self._reschedule(other)

    config.option.loadscopereorder = False
    return GroupScheduling(config, log)


def _uses_default_server(item: pytest.Item) -> bool:
    return "default_server" in getattr(item, "fixturenames", ())


class _DefaultServer:
    """The session's ``default_server``: started on first use, stopped after :attr:`last_user`'s teardown (and at
    the end of the session at the latest); started again should a later test ask for it."""

    last_user: pytest.Item | None = None
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
    if _DefaultServer.running is not None and item is _DefaultServer.last_user:
        _DefaultServer.running.stop()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight Llama model (2 layers, hidden 128) with the Llama-2 tokenizer, made once per session."""
    from semsched.calibrate.tiny_model import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny-model") / "model")
