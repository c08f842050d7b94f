"""Scheduler classes for server tests that record, in the engine process, the order in which requests finish.

The clients of a ``vllm serve`` on 2 cores see stream chunks late and bunched (the engine starves the API server),
so finish order is read where it happens: each class appends ``<priority> <request id>`` to the file named by
``SEMSCHED_TEST_FINISH_LOG`` when a request finishes. They change no decision: ``VllmRecorder`` is vLLM's own
scheduler (its ``--scheduling-policy`` applies), ``SemschedRecorder`` is semsched's adapter.
"""

from __future__ import annotations

import os
from typing import Any

from vllm.v1.core.sched.scheduler import Scheduler as VllmScheduler

from semsched.vllm.scheduler import Scheduler as SemschedScheduler

FINISH_LOG_ENV = "SEMSCHED_TEST_FINISH_LOG"


class _FinishLog:
    """Mixin: remembers each request's priority and logs finishes (put it before the scheduler class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.semsched_test_priorities: dict[str, int] = {}

    def add_request(self, request: Any) -> None:
        self.semsched_test_priorities[request.request_id] = request.priority
        super().add_request(request)  # type: ignore[misc]

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        outputs = super().update_from_output(scheduler_output, model_runner_output)  # type: ignore[misc]
        path = os.environ.get(FINISH_LOG_ENV)
        lines = [
            f"{self.semsched_test_priorities.get(item.request_id, '?')} {item.request_id}\n"
            for batch in outputs.values() for item in batch.outputs if item.finish_reason is not None
        ]
        if path and lines:
            with open(path, "a", encoding="utf-8") as log:
                log.writelines(lines)
        return outputs


class VllmRecorder(_FinishLog, VllmScheduler):
    pass


class SemschedRecorder(_FinishLog, SemschedScheduler):
    pass
