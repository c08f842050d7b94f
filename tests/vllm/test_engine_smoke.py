"""vLLM's own scheduler on the tiny model through ``vllm.LLM``: the base that the adapter's engine tests extend."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from vllm import LLM

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_every_request_gets_exactly_max_tokens(default_llm: LLM) -> None:
    from vllm import SamplingParams

    max_tokens = [1, 2, 3, 5, 8, 13, 21, 34]
    prompts = [f"request {i}: tell me something about scheduling" for i in range(len(max_tokens))]
    params = [SamplingParams(max_tokens=k, ignore_eos=True, temperature=0.0) for k in max_tokens]
    outputs = default_llm.generate(prompts, params, use_tqdm=False)
    assert [len(out.outputs[0].token_ids) for out in outputs] == max_tokens
    assert all(out.outputs[0].finish_reason == "length" for out in outputs)


def test_prompts_are_tokenized_as_llama_2(default_llm: LLM) -> None:
    from transformers import AutoTokenizer

    from semsched.calibrate.tiny_model import tokenizer_dir

    text = "hello world, this is a test"
    expected = AutoTokenizer.from_pretrained(tokenizer_dir())(text)["input_ids"]
    assert default_llm.get_tokenizer().encode(text) == expected
