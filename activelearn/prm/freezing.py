"""Which of the backbone's parameters train: its transformer blocks, found by shape."""

from __future__ import annotations

import torch

from activelearn.prm.modeling import ProcessRewardModel
from activelearn.prm.modeling import transformer_blocks as modeling_transformer_blocks


def transformer_blocks(model: ProcessRewardModel) -> torch.nn.ModuleList | None:
    return modeling_transformer_blocks(model.backbone)


def freeze_lower_layers(model: ProcessRewardModel, count: int) -> int:
    """Stop gradients into the embeddings and the lowest ``count`` layers; returns how many.

    The layers are ``transformer_blocks``. ``count`` at or past the number of layers
    freezes the whole backbone: then only the head trains (``head_training``).
    """
    if count <= 0:
        return 0
    total = int(getattr(model.backbone.config, "num_hidden_layers", 0))
    blocks = transformer_blocks(model)
    if blocks is None:
        raise ValueError("cannot find the backbone's transformer layers to freeze")
    if count >= total:
        model.backbone.requires_grad_(False)
        return total
    # Everything below the first trained block is frozen (word, position and type
    # embeddings); the trained blocks and whatever follows them (a final norm) are not.
    embeddings = model.backbone.get_input_embeddings()
    model.backbone.requires_grad_(False)
    for block in list(blocks)[count:]:
        block.requires_grad_(True)
    for child in model.backbone.children():
        inside = {id(m) for m in child.modules()}
        if id(blocks) not in inside and id(embeddings) not in inside:
            child.requires_grad_(True)
    return count
