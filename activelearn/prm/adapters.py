"""LoRA on the PRM's backbone (through ``peft``), for backbones whose full fine-tune does
not fit the GPU (``activelearn.prm.memory`` decides).

Every linear layer of the backbone gets a rank-``rank`` adapter and the backbone's own
weights are frozen; the reward head stays fully trainable (it is new, and small).

A trained adapter is merged into the backbone before the PRM is saved
(``merge_adapters``), so a LoRA checkpoint is an ordinary PRM directory: scoring,
``evaluate_prm``, bf16 loading and training on from it read it exactly like a fully
fine-tuned one, and nothing that loads a checkpoint needs ``peft``. The price is the size
on disk (the whole backbone rather than a few MB of adapter), which every full checkpoint
pays too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from activelearn.prm.modeling import ProcessRewardModel

# The adapter's dropout stays 0: an Identity in front of each adapter keeps its input the
# very tensor the frozen layer reads, so LoRA saves no extra activations
# (``activelearn.prm.memory`` counts on that).
LORA_DROPOUT = 0.0


def apply_lora(model: ProcessRewardModel, *, rank: int, alpha: int) -> int:
    """Wrap ``model.backbone`` in LoRA adapters on every linear layer; returns the number of
    trainable parameters (adapters and head)."""
    from peft import LoraConfig, get_peft_model

    if rank < 1:
        raise ValueError(f"lora_rank must be >= 1, got {rank}")
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=LORA_DROPOUT, target_modules="all-linear", bias="none")
    # autocast_adapter_dtype: adapters on bf16 weights are kept in float32, master weights
    # for AdamW like the head's.
    # A PeftModel forwards every attribute of the PreTrainedModel it wraps.
    model.backbone = get_peft_model(model.backbone, config, autocast_adapter_dtype=True)  # type: ignore[assignment]
    model.head.requires_grad_(True)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def has_adapters(model: ProcessRewardModel) -> bool:
    from peft import PeftModel

    return isinstance(model.backbone, PeftModel)


def merge_adapters(model: ProcessRewardModel) -> None:
    """Fold the adapters into the backbone's weights and drop them (in place): the PRM then
    computes what it computed with them and saves like any other."""
    from peft import PeftModel

    backbone = model.backbone
    if isinstance(backbone, PeftModel):
        with torch.no_grad():
            model.backbone = backbone.merge_and_unload()
