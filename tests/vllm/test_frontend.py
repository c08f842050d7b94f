"""The API-server side of rejections (semsched/vllm/frontend.py): a streamed rejection becomes vLLM's error."""

from __future__ import annotations

import pytest
from vllm.outputs import CompletionOutput, RequestOutput
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine.output_processor import RequestOutputCollector

from semsched.vllm import frontend


def _output(finish_reason: str | None, stop_reason: str | None, token_ids: list[int] | None = None
            ) -> RequestOutput:
    completion = CompletionOutput(index=0, text="", token_ids=token_ids or [], cumulative_logprob=None,
                                  logprobs=None, finish_reason=finish_reason, stop_reason=stop_reason)
    return RequestOutput("r-0", prompt=None, prompt_token_ids=[1, 2], prompt_logprobs=None, outputs=[completion],
                         finished=finish_reason is not None)


def test_a_policy_rejection_is_a_503_and_an_invalid_input_a_400_naming_the_field() -> None:
    policy = frontend.rejection_error(_output("abort", "semsched: rejected by edf: deadline already missed"))
    assert isinstance(policy, frontend.RejectedByPolicy) and policy.http_status == 503
    assert policy.message == "semsched: rejected by edf: deadline already missed"
    reason = "semsched: invalid request: vllm_xargs.urgency: must be ..."
    invalid = frontend.rejection_error(_output("abort", reason))
    assert isinstance(invalid, frontend.InvalidSchedulingInput) and invalid.parameter == "vllm_xargs.urgency"
    assert str(invalid) == "semsched: invalid request: vllm_xargs.urgency: must be ..."


@pytest.mark.parametrize("output", [
    _output(None, None),  # not finished
    _output("abort", None),  # a client's abort
    _output("length", None, [7, 7]),
    _output("abort", "semsched: rejected by edf: late", [7]),  # tokens came: vLLM streams it
    _output("abort", "some other plug-in's reason"),
])
def test_other_outputs_are_left_alone(output: RequestOutput) -> None:
    assert frontend.rejection_error(output) is None


def test_only_streamed_requests_get_the_error() -> None:
    frontend.install()
    frontend.install()  # idempotent
    rejected = _output("abort", "semsched: rejected by edf: late")
    streamed = RequestOutputCollector(RequestOutputKind.DELTA, "r-0")
    streamed.put(rejected)
    with pytest.raises(frontend.RejectedByPolicy, match="rejected by edf: late"):
        streamed.get_nowait()
    final_only = RequestOutputCollector(RequestOutputKind.FINAL_ONLY, "r-0")
    final_only.put(rejected)
    assert final_only.get_nowait() is rejected  # keeps finish_reason "abort" and stop_reason
