"""What semsched changes in vLLM's API-server process: a streamed request the adapter rejects ends with its reason.

The adapter ends a request it does not admit (the policy's ``admit``, or invalid ``priority``/``vllm_xargs``) at
once, with ``finish_reason="abort"`` and the reason in ``stop_reason``. A non-streamed response carries both. A
streamed one carried neither: vLLM 0.32's OpenAI serving layer drops an output that has no text and no tokens
when nothing came before it (``completion_stream_generator`` and ``chat_completion_stream_generator``: "Chunked
prefill case, don't return empty chunks"), so the client got only ``data: [DONE]`` (chat: the role chunk, then
nothing), and no chunk can carry a finish reason without a token.

So, in the API server, :func:`install` turns such a streamed rejection into the exception vLLM itself raises when
it refuses a request (what its admission control does), which its serving layer ends the stream with: a last
``data: {"error": {"message": ..., "type": ..., "code": ...}}`` event before ``[DONE]``:

* invalid inputs: ``VLLMValidationError`` naming the field, code 400 (``BadRequestError``);
* the policy's rejection: ``GracefulHTTPError`` with 503 (``Service Unavailable``), as vLLM's own admission
  control (``QueueOverflowError``) answers.

The message is the adapter's, e.g. ``semsched: rejected by edf: ...``. vLLM logs such a stream error with a
traceback; :func:`install` makes that one plain line. Non-streamed responses are left as they were.
:class:`~semsched.vllm.middleware.XargsValidationMiddleware` calls :func:`install` when the server builds its app.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from vllm.exceptions import GracefulHTTPError, VLLMValidationError
from vllm.outputs import RequestOutput
from vllm.v1.engine.output_processor import RequestOutputCollector

from semsched.vllm.xargs import INVALID_REQUEST_PREFIX, REJECTED_PREFIX

# the loggers of vLLM's streaming generators, which log an error that ends a stream with its traceback
STREAM_LOGGERS = ("vllm.entrypoints.openai.completion.serving", "vllm.entrypoints.openai.chat_completion.serving")


class RejectedByPolicy(GracefulHTTPError):
    """The adapter's policy did not admit the request (503, as vLLM's own admission control)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, HTTPStatus.SERVICE_UNAVAILABLE)


class InvalidSchedulingInput(VLLMValidationError):
    """The request's ``priority`` or ``vllm_xargs`` is invalid (400, naming the field)."""

    def __str__(self) -> str:
        return str(self.args[0])  # the message names the field already


def rejection_error(output: object) -> Exception | None:
    """The error a rejected request's output stands for, or None for any other output."""
    if not isinstance(output, RequestOutput) or not output.finished:
        return None
    for completion in output.outputs:
        reason = completion.stop_reason
        if completion.finish_reason != "abort" or not isinstance(reason, str) or completion.token_ids:
            continue
        if reason.startswith(INVALID_REQUEST_PREFIX):
            field = reason.removeprefix(INVALID_REQUEST_PREFIX).split(":", 1)[0]
            return InvalidSchedulingInput(reason, parameter=field)
        if reason.startswith(REJECTED_PREFIX):
            return RejectedByPolicy(reason)
    return None


class _PlainStreamError(logging.Filter):
    """Logs a stream that ended with a semsched rejection as one line, without vLLM's traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, RejectedByPolicy | InvalidSchedulingInput):
            record.msg, record.args = "stream ended: %s", (str(error),)
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        return True


def install() -> None:
    """Turn streamed semsched rejections into stream errors in this process (idempotent)."""
    original = RequestOutputCollector.put
    if getattr(original, "semsched", False):
        return

    def put(self: RequestOutputCollector, output: Any) -> None:
        error = rejection_error(output) if self.aggregate else None  # aggregate: a streamed (delta) request
        original(self, output if error is None else error)

    put.semsched = True  # type: ignore[attr-defined]
    RequestOutputCollector.put = put  # type: ignore[method-assign]
    for name in STREAM_LOGGERS:
        logging.getLogger(name).addFilter(_PlainStreamError())
