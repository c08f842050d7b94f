"""semsched.calibrate.tiny_model: spec validation, the files it writes, and reproducible weights."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from semsched.calibrate.tiny_model import TOKENIZER_FILES, TinyModelSpec, make_tiny_model, tokenizer_dir

SMALL = TinyModelSpec(num_layers=1, hidden_size=64, num_attention_heads=2, num_key_value_heads=1,
                      intermediate_size=96, max_position_embeddings=256)  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"num_layers": 0}, "num_layers"),
        ({"hidden_size": -128}, "hidden_size"),
        ({"num_key_value_heads": 0}, "num_key_value_heads"),
        ({"intermediate_size": 0}, "intermediate_size"),
        ({"max_position_embeddings": 0}, "max_position_embeddings"),
        ({"hidden_size": 130, "num_attention_heads": 4}, "hidden_size"),
        ({"num_attention_heads": 4, "num_key_value_heads": 3}, "num_attention_heads"),
    ],
)
def test_a_bad_spec_names_the_field(fields: dict[str, int], named: str) -> None:
    with pytest.raises(ValueError, match=rf"^{named}:"):
        TinyModelSpec(**fields)


@pytest.fixture(scope="module")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("small") / "model", SMALL)


def test_config_has_the_spec_sizes(small_model: Path) -> None:
    config = json.loads((small_model / "config.json").read_text())
    assert config["num_hidden_layers"] == SMALL.num_layers
    assert config["hidden_size"] == SMALL.hidden_size
    assert config["num_attention_heads"] == SMALL.num_attention_heads
    assert config["num_key_value_heads"] == SMALL.num_key_value_heads
    assert config["intermediate_size"] == SMALL.intermediate_size
    assert config["max_position_embeddings"] == SMALL.max_position_embeddings
    assert config["vocab_size"] == 32000


def test_tokenizer_files_are_copied(small_model: Path) -> None:
    for name in TOKENIZER_FILES:
        assert (small_model / name).read_bytes() == (tokenizer_dir() / name).read_bytes()


def test_the_model_directory_tokenizes_as_llama_2(small_model: Path) -> None:
    """The tokenizer that transformers (and so vLLM) loads from the model directory is the Llama-2 one."""
    from transformers import AutoTokenizer

    text = "hello world, this is a test"
    ours = AutoTokenizer.from_pretrained(small_model)
    reference = AutoTokenizer.from_pretrained(tokenizer_dir())
    assert ours(text)["input_ids"] == reference(text)["input_ids"]
    assert ours.decode(ours(text)["input_ids"], skip_special_tokens=True) == text


def test_a_bad_destination_is_refused(small_model: Path) -> None:
    with pytest.raises(FileExistsError, match="not empty"):
        make_tiny_model(small_model, SMALL)


def _weights(dest: Path, seed: int) -> bytes:
    return (make_tiny_model(dest, replace(SMALL, seed=seed)) / "model.safetensors").read_bytes()


def test_same_seed_same_weights_other_seed_other_weights(tmp_path: Path) -> None:
    first = _weights(tmp_path / "a", seed=1)
    assert _weights(tmp_path / "b", seed=1) == first
    assert _weights(tmp_path / "c", seed=2) != first


def test_the_callers_random_state_is_left_alone(tmp_path: Path) -> None:
    import torch

    before = torch.random.get_rng_state()
    make_tiny_model(tmp_path / "model", SMALL)
    assert torch.equal(torch.random.get_rng_state(), before)
