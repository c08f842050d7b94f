"""A tiny random-weight model that vLLM can serve: for tests, demos and profiling on machines without a real model.

The model is a Llama causal LM (2 layers, hidden 128 by default) with random weights, paired with the Llama-2
tokenizer from ``../shared/data/tokenizers/llama2_tinyllama`` (vocab 32,000). Nothing is downloaded: the config
is built with ``transformers`` and the weights are drawn from a seeded generator, so the same arguments give the
same files. Its text is gibberish; its *cost* per token is what a scheduler test or a latency profile needs.

Why Llama and not Qwen2 (the architecture of the Qwen1.5 latency profiles): for a Qwen2 model directory
``transformers`` picks its own Qwen2 tokenizer class whatever ``tokenizer_config.json`` says, which reads the
Llama-2 files as a byte-level BPE: "hello world" became 4 tokens instead of 2 and decoded text kept the "▁"
marks. With the Llama architecture, vLLM tokenizes prompts exactly as the Llama-2 tokenizer does.

Requires ``torch`` and ``transformers`` (installed with vLLM); imported lazily so the core stays torch-free.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from semsched.workloads.traces import data_dir

TOKENIZER_DIR = "tokenizers/llama2_tinyllama"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "chat_template.jinja")


@dataclass(frozen=True)
class TinyModelSpec:
    """The model's sizes and the seed of its weights; a bad value raises ValueError naming the field."""

    num_layers: int = 2
    hidden_size: int = 128
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 256
    max_position_embeddings: int = 4096
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
                     "intermediate_size", "max_position_embeddings"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1 (got {getattr(self, name)})")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size: must be a multiple of num_attention_heads")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads: must be a multiple of num_key_value_heads")


def tokenizer_dir() -> Path:
    path = data_dir() / TOKENIZER_DIR
    if not (path / "tokenizer.json").is_file():
        raise FileNotFoundError(
            f"{path}: the Llama-2 tokenizer is missing (expected ../shared/data/{TOKENIZER_DIR}/tokenizer.json; "
            "set SEMSCHED_DATA_DIR to the data folder)"
        )
    return path


def make_tiny_model(dest: str | Path, spec: TinyModelSpec | None = None) -> Path:
    """Write a servable random-weight model directory to ``dest`` (created; must be empty or absent)."""
    import torch
    import transformers

    llama_config: Any = transformers.LlamaConfig
    llama_model: Any = transformers.LlamaForCausalLM

    spec = spec or TinyModelSpec()
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise FileExistsError(f"{dest}: not empty; give a new directory")
    source = tokenizer_dir()
    dest.mkdir(parents=True, exist_ok=True)
    config = llama_config(
        vocab_size=32000,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        dtype="bfloat16",
    )
    with torch.random.fork_rng(devices=[]):  # seeded weights, and the caller's global RNG left as it was
        torch.manual_seed(spec.seed)
        model = llama_model(config).to(torch.bfloat16)
    model.save_pretrained(dest)
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, dest / name)
    return dest
