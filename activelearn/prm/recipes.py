"""Training defaults per backbone family: what a ``TrainConfig`` left at None resolves to.

A 22M-parameter encoder, a 135M causal LM and a 1.5B math model want different learning
rates, lengths and budgets; one set of defaults cannot serve them all (a 1.5B-model rate
of 1e-5 leaves MiniLM predicting the class prior). The values for the CPU families are
the ones measured on the CHAMP split (docs/prm.md, "Real data"); the large family follows
the PRM800K recipe.

The family is read from the spec and, for a local directory, from its ``config.json``
alone, so resolving costs no model load.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Family = Literal["tiny", "simulated", "small_encoder", "small_causal", "large_causal"]

# BERT-style models: bidirectional encoders that the PRM switches to causal attention.
ENCODER_MODEL_TYPES = frozenset(
    {"bert", "roberta", "xlm-roberta", "electra", "ernie", "camembert", "data2vec-text", "xlm-roberta-xl"}
)
# A freeze_layers value at or past any backbone's layer count: the whole backbone.
FREEZE_ALL = 1000
# L2 strengths of a penalised head (weighted mean loss + strength / 2 x |W|^2 on
# standardised features): the range a logistic regression chose from on CHAMP's validation
# splits, 1 / (C x labels) for C in 0.001-0.1 (benchmarks/prm_readers.py), widened both ways.
HEAD_L2_GRID = (0.003, 0.01, 0.03, 0.1, 0.3, 1.0)
# A recipe's or a run's aggregation (Recipe.aggregation): chosen on the validation pool, or
# one of activelearn.prm.scoring.REDUCTIONS fixed (a literal here, so that validating a
# request imports no torch; a test pins it to REDUCTIONS).
CHOOSE_AGGREGATION = "choose"
AGGREGATIONS = (CHOOSE_AGGREGATION, "min", "product", "mean", "last")


def nonnegative_option_check(name: str, value: object) -> None:
    """Refuse a training option that must be a finite number >= 0 (a boolean is not one),
    here so that validating a request imports no torch."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


# Above this hidden size a model is trained with the large (GPU) recipe.
LARGE_HIDDEN_SIZE = 1536
SIMULATED_LEARNING_RATE = 1e-3
# A simulated backbone's directory holds its pretraining record under this name
# (activelearn.simulation.backbone writes it): such a directory is the simulated family.
PRETRAIN_FILE = "pretrain.json"

# Specs by prefix whose models are built elsewhere (``sim:<name>``: the campaign
# simulator's pretrained backbones). The package that builds them registers how such a
# spec becomes a local model directory, so prm/ never imports it.
_PREFIXED_SPECS: dict[str, Callable[[str], Path]] = {}


def register_backbone_prefix(prefix: str, directory_of: Callable[[str], Path]) -> None:
    """Let ``load_backbone`` resolve specs starting with ``prefix`` to ``directory_of(spec)``."""
    _PREFIXED_SPECS[prefix] = directory_of


def prefixed_spec_directory(spec: str) -> Path | None:
    """The model directory of a registered prefixed spec; None when no prefix matches."""
    for prefix, directory_of in _PREFIXED_SPECS.items():
        if spec.startswith(prefix):
            return directory_of(spec)
    return None


@dataclass(frozen=True)
class Recipe:
    family: Family
    learning_rate: float
    num_epochs: int
    max_length: int
    # Lower transformer layers (and the embeddings) kept frozen: on a CPU the backward
    # pass through them is most of the cost, and with a few hundred labeled solutions
    # the top layers are what needs to move.
    freeze_layers: int
    # What the head reads beside the hidden state (activelearn.prm.modeling.STEP_FEATURES).
    step_features: tuple[str, ...] = ()
    # The share of the backbone's layers kept, the head reading the last one kept
    # (TrainConfig.backbone_layers); None: all.
    backbone_layer_share: float | None = None
    # Head only: the L2 strengths the head is fitted at, the best on validation kept
    # (TrainConfig.head_l2); (): AdamW for num_epochs at learning_rate.
    head_l2: tuple[float, ...] = ()
    # The rate under LoRA (TrainConfig.adapter): adapters start at zero and move through a
    # rank-r bottleneck, so they want a larger step than full fine-tuning (a starting point,
    # not measured on CHAMP).
    lora_learning_rate: float = 1e-4
    # How step scores become a solution score (activelearn.prm.scoring.REDUCTIONS), or
    # "choose": chosen per run on the validation problems' graded pool
    # (activelearn.prm.calibration), which scores up to 16 pool solutions a validation
    # problem: cheap with MiniLM, two thirds of a cold start with a causal LM.
    aggregation: str = CHOOSE_AGGREGATION
    # How far the first-error threshold falls along a solution (TrainConfig.threshold_decay,
    # in standard deviations of the validation steps' logits per log(1 + step index)).
    threshold_decay: float = 0.0


RECIPES: dict[Family, Recipe] = {
    "tiny": Recipe("tiny", learning_rate=1e-2, num_epochs=2, max_length=512, freeze_layers=0, lora_learning_rate=1e-2),
    # The LM-pretrained backbone of the simulated domain (activelearn.simulation.backbone):
    # the head reads the frozen LM's surprise at each step's tokens beside its hidden
    # state. Fine-tuning the whole model on a few hundred labels reached step AUROC 0.67;
    # the frozen LM's surprise alone, with no label at all, ranks steps at 0.99
    # (docs/simulation.md).
    "simulated": Recipe(
        "simulated",
        learning_rate=SIMULATED_LEARNING_RATE,
        num_epochs=6,
        max_length=256,
        freeze_layers=FREEZE_ALL,
        step_features=("surprise",),
    ),
    # Head only, on features computed once (FREEZE_ALL): the one recipe that trains on the
    # CHAMP split in minutes on 2 cores; its rate and epochs are the head's.
    "small_encoder": Recipe(
        "small_encoder", learning_rate=1e-3, num_epochs=5, max_length=384, freeze_layers=FREEZE_ALL
    ),
    # Head only, reading the middle layer (cut there: half the forward pass) at the separator
    # and averaged over the step's tokens. On CHAMP with SmolLM2 a causal LM's step AUROC
    # peaks at its layers 12-18 of 30 and is lowest at the last; the span beside the
    # separator adds to it (docs/prm.md, "Which reading of a step carries the signal":
    # chosen on validation, split seeds 0-2).
    "small_causal": Recipe(
        "small_causal",
        learning_rate=1e-3,
        num_epochs=5,
        max_length=512,
        freeze_layers=FREEZE_ALL,
        step_features=("span",),
        backbone_layer_share=0.5,
        head_l2=HEAD_L2_GRID,
        # The pool's choice was "mean" on every split seed of the CHAMP study, for this
        # recipe and for MiniLM's (docs/prm.md, "How each default was chosen"); fixing it
        # spares a first training the scoring of some 860 validation-pool solutions, two thirds
        # of its cost on a CPU.
        aggregation="mean",
        # Chosen on validation first-error F1, mean over CHAMP split seeds 0-7 (0.15 and
        # 0.20 tied at 0.361 against 0.346 flat; the smaller kept): docs/prm.md, "How each
        # default was chosen".
        threshold_decay=0.15,
    ),
    "large_causal": Recipe("large_causal", learning_rate=1e-5, num_epochs=2, max_length=2048, freeze_layers=0),
}


# On a GPU a forward and backward pass are cheap: MiniLM fine-tunes there (a starting
# point, not measured on CHAMP; docs/prm.md). A small causal LM keeps its CPU recipe: fully
# fine-tuned (5e-5, 2 epochs, 1024 tokens, run on the CPU) SmolLM2 reached validation step
# AUROC 0.770 on CHAMP's split seed 0 against the frozen middle layer's 0.813.
GPU_RECIPES: dict[Family, Recipe] = {
    "small_encoder": Recipe("small_encoder", learning_rate=1e-4, num_epochs=3, max_length=512, freeze_layers=0),
}


def family_of_config(config: dict[str, object]) -> Family:
    model_type = str(config.get("model_type", ""))
    hidden = config.get("hidden_size")
    if model_type in ENCODER_MODEL_TYPES:
        return "small_encoder"
    if isinstance(hidden, int) and hidden < LARGE_HIDDEN_SIZE:
        return "small_causal"
    return "large_causal"


def backbone_family(spec: str) -> Family:
    """The family of a backbone spec (builtin name, local HF directory or saved PRM)."""
    if spec.startswith("tiny:"):
        return "tiny"
    if spec.startswith("sim:"):
        return "simulated"
    if spec == "builtin:minilm":
        return "small_encoder"
    if spec.startswith("builtin:"):
        return "small_causal"
    directory = Path(spec).expanduser()
    saved_prm = directory / "prm_config.json"
    if saved_prm.is_file():
        # Continuing from a saved PRM: its base decides, else its saved backbone's config.
        base = json.loads(saved_prm.read_text()).get("base_model", "")
        if isinstance(base, str) and base.startswith(("tiny:", "sim:", "builtin:")):
            return backbone_family(base)
        directory = directory / "backbone"
    # A simulated backbone's cache directory (what the campaign simulator trains from) is
    # the simulated family, not just a small Llama: its recipe reads the LM's surprise.
    if (directory / PRETRAIN_FILE).is_file():
        return "simulated"
    config_file = directory / "config.json"
    if config_file.is_file():
        return family_of_config(json.loads(config_file.read_text()))
    return "large_causal"


def recipe_for(spec: str, *, gpu: bool = False) -> Recipe:
    family = backbone_family(spec)
    return GPU_RECIPES.get(family, RECIPES[family]) if gpu else RECIPES[family]
