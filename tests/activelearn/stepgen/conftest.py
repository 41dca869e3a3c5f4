"""Fixtures for the step-generation tests: a tiny causal LM on disk, a fake-free HTTP server."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tokenizers import Regex, Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

# A word-level vocabulary small enough that a random model emits "\n" often, so samples
# end in whole lines within a few dozen tokens; "#" and "Answer" make answer steps possible.
TINY_VOCAB = ["<pad>", "<eos>", "<unk>", "\n", "#", "Answer", "x", "=", "2", "3", "+", "so", "we", "add", "both"]


def build_tiny_causal_lm(directory: Path) -> Path:
    """Save a randomly initialised 2-layer LLaMA causal LM and its tokenizer to ``directory``."""
    tokenizer = Tokenizer(models.WordLevel({word: i for i, word in enumerate(TINY_VOCAB)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(" +"), behavior="removed"), pre_tokenizers.Split(Regex("\n"), "isolated")]
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")  # type: ignore[no-untyped-call]
    fast.save_pretrained(directory)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(TINY_VOCAB),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        pad_token_id=0,
        bos_token_id=None,
        eos_token_id=1,
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(config).save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_causal_lm(tmp_path_factory.mktemp("tiny-causal-lm"))
