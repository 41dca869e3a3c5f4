"""Fine-tune a PRM on labeled solutions, resumably, through ``accelerate``.

Run in-process (``train_prm(...)``) or in every process of a distributed run
(``activelearn.prm.distributed`` launches one per GPU): the Accelerator picks up the
launcher's environment and shards the batches; a full fine-tune is sharded with FSDP
(weights, gradients and optimizer state split across the processes), a LoRA run is
replicated (DDP). Full fine-tune or LoRA is chosen by the memory estimate
(``activelearn.prm.memory``) unless the config says which.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import shutil
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType, set_seed
from torch.utils.data import DataLoader
from transformers import get_scheduler
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from activelearn.prm.adapters import apply_lora, has_adapters, merge_adapters
from activelearn.prm.atomic_dir import sweep_scratch
from activelearn.prm.backbones import backbone_config
from activelearn.prm.batching import (
    EpochBatchSampler,
    LabeledSequence,
    TrainingCollator,
    encode_examples,
)
from activelearn.prm.calibration import calibrate
from activelearn.prm.data import (
    OBJECTIVES,
    OUTCOME_TARGETS,
    LabeledSolution,
    NeutralHandling,
    Objective,
    OutcomeSolution,
    OutcomeTargets,
    StepExample,
    TrainingItem,
    split_by_problem,
    training_examples,
)
from activelearn.prm.evaluation import auroc
from activelearn.prm.freezing import freeze_lower_layers, transformer_blocks
from activelearn.prm.head_training import (
    HeadEpoch,
    backbone_is_frozen,
    fit_head,
    fit_penalised_head,
    separator_features,
    with_label_weights,
)
from activelearn.prm.memory import ADAPTERS, Adapter, AdapterPlan, choose_adapter, device_memory, world_size
from activelearn.prm.modeling import CONFIG_FILE, IGNORE_INDEX, NEGATIVE, ProcessRewardModel
from activelearn.prm.recipes import AGGREGATIONS, CHOOSE_AGGREGATION, nonnegative_option_check, recipe_for
from activelearn.prm.scoring import Reduction

logger = logging.getLogger(__name__)

# (optimizer step, total optimizer steps, loss of that step). Raising from it stops the
# run; the last checkpoint stays valid, so a later call resumes.
ProgressCallback = Callable[[int, int, float], None]

CHECKPOINT_PREFIX = "checkpoint-"
TRAINER_STATE_FILE = "trainer_state.json"
FINAL_DIR = "final"
RESULT_FILE = "result.json"
# Who owns an output directory: the run id, backbone and data fingerprint of the run that
# wrote it. Resuming adopts only a directory whose manifest matches (``output_dir_claim``).
RUN_MANIFEST_FILE = "run.json"


@dataclass
class TrainConfig:
    output_dir: Path
    # "builtin:minilm", "tiny:bert", a local HF model directory, or a saved PRM directory
    # (then training continues from that PRM, head included).
    backbone: str = "builtin:minilm"
    # None: the backbone family's recipe (activelearn.prm.recipes); resolved values are
    # what ``hyperparameters()`` records after ``resolved()``.
    learning_rate: float | None = None
    weight_decay: float = 0.0
    num_epochs: int | None = None
    max_steps: int | None = None
    batch_size: int = 8  # sequences per device per micro-batch
    gradient_accumulation_steps: int = 1
    warmup_ratio: float = 0.05
    lr_scheduler: str = "linear"
    max_grad_norm: float = 1.0
    max_length: int | None = None  # None: the recipe's, capped at the backbone's positions
    max_problem_tokens: int | None = None  # None: max_length // 2
    # Embeddings and this many lower transformer layers get no gradient (None: recipe).
    freeze_layers: int | None = None
    # Step features the head reads (activelearn.prm.modeling.STEP_FEATURES; None: recipe).
    step_features: tuple[str, ...] | None = None
    # Head-only training: L2 strengths to fit the head at, the one with the best validation
    # step AUROC kept (head_training.fit_penalised_head); () trains it for num_epochs with
    # AdamW instead. None: the recipe's.
    head_l2: tuple[float, ...] | None = None
    # How step scores become a solution score: a name from scoring.REDUCTIONS, or "choose"
    # (on the validation problems' graded pool, calibration.calibrate). None: the recipe's.
    aggregation: str | None = None
    # How far the first-error threshold falls along a solution, in standard deviations of
    # the validation steps' logits per log(1 + step index) (calibration.calibrate); 0: flat.
    # None: the recipe's.
    threshold_decay: float | None = None
    # The backbone's lowest layers kept; the head reads the last of them
    # (activelearn.prm.modeling.cut_backbone). None: the recipe's; the layer count: all.
    backbone_layers: int | None = None
    # "balanced": the loss weighs each class by total / (classes x its count), so a
    # minority of -1 steps is not drowned by the +1 majority; "none": plain cross-entropy.
    class_weighting: str = "balanced"
    neutral: NeutralHandling = "own"
    val_fraction: float = 0.1  # used only when no explicit validation set is given
    split_salt: str = "prm-split"
    seed: int = 0
    mega_batch_batches: int = 50
    checkpoint_every: int = 200  # optimizer steps; 0 disables intermediate checkpoints
    keep_checkpoints: int = 2
    bf16: bool | None = None  # None: on when CUDA is available
    gradient_checkpointing: bool | None = None  # None: on when CUDA is available
    eval_batch_size: int = 16
    cpu: bool = False
    # "process": a PRM on human step labels (outcome solutions may join them, below);
    # "outcome": an ORM, trained on OutcomeSolutions only, each labeled at its final step.
    objective: Objective = "process"
    # In a process run, the loss weight of each outcome label relative to a human step
    # label (0: the outcome solutions are left out), and which of an outcome solution's
    # steps are labeled: "final" or "every_step" (every step gets the answer's verdict).
    outcome_weight: float = 1.0
    outcome_targets: OutcomeTargets = "final"
    # "full": every weight of the unfrozen layers trains (sharded with FSDP when the run has
    # several processes); "lora": LoRA adapters on the backbone's linear layers, the head
    # fully; "auto": full when its memory estimate fits the device, else LoRA, else refused
    # with the numbers (activelearn.prm.memory). A left-out learning rate is the recipe's
    # LoRA rate under LoRA.
    adapter: Adapter = "auto"
    lora_rank: int = 16
    lora_alpha: int = 32
    # Training processes, one per GPU: None is every GPU this process sees (1 on a CPU).
    # More than one runs training as a distributed run (activelearn.prm.distributed).
    processes: int | None = None

    def __post_init__(self) -> None:
        if self.adapter not in ADAPTERS:
            raise ValueError(f"adapter must be one of {list(ADAPTERS)}, got {self.adapter!r}")
        if self.processes is not None and self.processes < 1:
            raise ValueError(f"processes must be at least 1, got {self.processes}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {list(OBJECTIVES)}, got {self.objective!r}")
        if self.aggregation is not None and self.aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {list(AGGREGATIONS)}, got {self.aggregation!r}")
        if self.threshold_decay is not None:
            nonnegative_option_check("threshold_decay", self.threshold_decay)
        if self.outcome_targets not in OUTCOME_TARGETS:
            raise ValueError(f"outcome_targets must be one of {list(OUTCOME_TARGETS)}, got {self.outcome_targets!r}")
        nonnegative_option_check("outcome_weight", self.outcome_weight)
        if self.objective == "outcome" and self.outcome_targets != "final":
            raise ValueError(
                "outcome_targets applies to outcome labels mixed into a process run; "
                "an ORM (objective='outcome') labels the final step only"
            )

    def hyperparameters(self) -> dict[str, Any]:
        values = asdict(self)
        values["output_dir"] = str(self.output_dir)
        return values

    def resolved(self) -> TrainConfig:
        """This config with every None default replaced by the backbone family's recipe."""
        recipe = recipe_for(self.backbone, gpu=torch.cuda.is_available() and not self.cpu)
        return replace(
            self,
            learning_rate=self.learning_rate if self.learning_rate is not None else recipe.learning_rate,
            num_epochs=self.num_epochs if self.num_epochs is not None else recipe.num_epochs,
            max_length=self.max_length if self.max_length is not None else recipe.max_length,
            freeze_layers=self.freeze_layers if self.freeze_layers is not None else recipe.freeze_layers,
            step_features=self._resolved_step_features(recipe.step_features),
            backbone_layers=self._resolved_backbone_layers(recipe.backbone_layer_share),
            head_l2=tuple(self.head_l2) if self.head_l2 is not None else recipe.head_l2,
            aggregation=self.aggregation if self.aggregation is not None else recipe.aggregation,
            threshold_decay=self.threshold_decay if self.threshold_decay is not None else recipe.threshold_decay,
        )

    @property
    def uses_cuda(self) -> bool:
        return torch.cuda.is_available() and not self.cpu

    @property
    def uses_bf16(self) -> bool:
        return self.uses_cuda if self.bf16 is None else self.bf16

    @property
    def uses_gradient_checkpointing(self) -> bool:
        return self.uses_cuda if self.gradient_checkpointing is None else self.gradient_checkpointing

    def planned(self, *, processes: int | None = None) -> tuple[TrainConfig, AdapterPlan]:
        """``resolved()`` with ``adapter`` decided (full or LoRA) for a run of ``processes``
        processes (default: the distributed run this process belongs to, else 1), and the
        estimate that decided it. Raises ``TrainingMemoryError`` when nothing fits."""
        resolved = self.resolved()
        assert resolved.freeze_layers is not None and resolved.max_length is not None
        recipe = recipe_for(self.backbone, gpu=self.uses_cuda)
        backbone = backbone_config(self.backbone)
        layers = int(getattr(backbone, "num_hidden_layers", 0) or 0)
        if backbone is None or resolved.freeze_layers >= layers:
            # Head only, on features computed once: nothing to shard or adapt.
            plan = AdapterPlan("full", "the backbone is frozen: the head trains alone")
            return replace(resolved, adapter="full"), plan
        positions = getattr(backbone, "max_position_embeddings", None) or resolved.max_length
        plan = choose_adapter(
            self.adapter,
            backbone,
            device_memory(cuda=self.uses_cuda),
            batch_size=self.batch_size,
            max_length=min(resolved.max_length, int(positions)),
            gradient_accumulation_steps=self.gradient_accumulation_steps,
            gradient_checkpointing=self.uses_gradient_checkpointing,
            bf16=self.uses_bf16,
            cuda=self.uses_cuda,
            processes=processes or world_size(),
            freeze_layers=resolved.freeze_layers,
            lora_rank=self.lora_rank,
            lora_alpha=self.lora_alpha,
        )
        learning_rate = resolved.learning_rate
        if plan.adapter == "lora" and self.learning_rate is None:
            learning_rate = recipe.lora_learning_rate
        return replace(resolved, adapter=plan.adapter, learning_rate=learning_rate), plan

    def _resolved_backbone_layers(self, share: float | None) -> int | None:
        if self.backbone_layers is not None:
            return self.backbone_layers
        # A saved PRM's backbone is already what it was cut to.
        if share is None or (Path(self.backbone).expanduser() / CONFIG_FILE).is_file():
            return None
        layers = int(getattr(backbone_config(self.backbone), "num_hidden_layers", 0) or 0)
        return max(1, round(share * layers)) if layers else None

    def _resolved_step_features(self, recipe_features: tuple[str, ...]) -> tuple[str, ...] | None:
        if self.step_features is not None:
            return tuple(self.step_features)
        # Training on from a saved PRM keeps the head it has, whatever today's recipe says.
        if (Path(self.backbone).expanduser() / CONFIG_FILE).is_file():
            return None
        return recipe_features


@dataclass(frozen=True)
class EpochReport:
    """Validation after one epoch, with the baseline a constant guess would reach."""

    epoch: int
    step: int
    train_loss: float | None  # mean loss of the epoch's optimizer steps
    val_loss: float | None
    val_accuracy: float | None
    # Accuracy of always predicting the most frequent validation class: an accuracy at
    # this level means the model learned the class prior and nothing else.
    val_majority_accuracy: float | None
    # AUROC of P(step is fine) against -1 vs the rest; 0.5 is chance whatever the prior.
    val_auroc: float | None
    val_labeled_steps: int
    # A penalised head (TrainConfig.head_l2): the strength kept, and the validation step
    # AUROC of each one tried.
    head_l2: float | None = None
    head_l2_val_aurocs: dict[str, float | None] | None = None


@dataclass
class TrainResult:
    final_dir: Path
    train_loss_curve: list[tuple[int, float]]
    val_loss: float | None
    val_accuracy: float | None
    val_labeled_steps: int
    val_majority_accuracy: float | None
    val_auroc: float | None
    epochs: list[dict[str, Any]]
    # Threshold and aggregation chosen on the validation solutions (None without any); an
    # ORM's are fixed: aggregation "last", no first-error threshold.
    calibration: dict[str, Any] | None
    examples_seen: int  # training sequences processed (including before a resume)
    labeled_steps_seen: int
    optimizer_steps: int
    resumed_from_step: int
    duration_s: float
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    # Labels of the training sequences by source: human step labels (LabeledSolution and
    # StepExample items) and answer verdicts (OutcomeSolution items), weight-0 ones left out.
    human_labels: int = 0
    outcome_labels: int = 0
    # Full fine-tune or LoRA, and the memory estimate that chose it (AdapterPlan.to_json).
    memory: dict[str, Any] | None = None

    def to_json(self) -> str:
        values = asdict(self)
        values["final_dir"] = str(self.final_dir)
        return json.dumps(values, indent=2)

    @classmethod
    def from_json(cls, text: str) -> TrainResult:
        values = json.loads(text)
        values["final_dir"] = Path(values["final_dir"])
        values["train_loss_curve"] = [(int(step), float(loss)) for step, loss in values["train_loss_curve"]]
        return cls(**values)


@dataclass
class _State:
    step: int = 0
    examples_seen: int = 0
    labeled_steps_seen: int = 0
    data_seed: int = 0
    loss_curve: list[tuple[int, float]] = field(default_factory=list)
    epochs: list[dict[str, Any]] = field(default_factory=list)


def latest_checkpoint(output_dir: Path) -> Path | None:
    """Newest complete checkpoint: renamed into place and carrying its trainer state."""
    if not output_dir.is_dir():
        return None
    found: list[tuple[int, Path]] = []
    for child in output_dir.iterdir():
        match = re.fullmatch(rf"{CHECKPOINT_PREFIX}(\d+)", child.name)
        if match and (child / TRAINER_STATE_FILE).is_file():
            found.append((int(match.group(1)), child))
    return max(found)[1] if found else None


def _prepare_examples(items: Sequence[TrainingItem], config: TrainConfig) -> tuple[list[StepExample], int, int]:
    """The items' training sequences, and how many labels came from humans and from answers."""
    examples = training_examples(
        items,
        objective=config.objective,
        neutral=config.neutral,
        outcome_weight=config.outcome_weight,
        outcome_targets=config.outcome_targets,
    )
    human = outcome = 0
    for example in examples:
        labels = sum(label is not None for label in example.labels)
        if example.source == "outcome":
            outcome += labels
        else:
            human += labels
    return examples, human, outcome


def outcome_calibration(validation_solutions: int) -> dict[str, Any]:
    """An ORM's calibration: nothing is chosen. It is trained to score the whole solution
    at its final step, so that step's score is the solution's ("last"); it is never taught
    where an error is, so it has no first-error threshold."""
    return {
        "objective": "outcome",
        "threshold": None,
        "aggregation": "last",
        "aggregation_reason": "outcome-supervised: trained to score the solution at its final step",
        "solutions": validation_solutions,
    }


def _build_model(config: TrainConfig) -> tuple[ProcessRewardModel, PreTrainedTokenizerBase]:
    source = Path(config.backbone).expanduser()
    # LoRA never updates the backbone's weights, so they need no float32 master copy.
    dtype = torch.bfloat16 if config.adapter == "lora" and config.uses_bf16 else None
    if (source / CONFIG_FILE).is_file():
        model, tokenizer = ProcessRewardModel.from_pretrained(source, dtype=dtype)
        saved = tuple(model.prm_config.step_features)
        if config.step_features is not None and tuple(config.step_features) != saved:
            # The head's inputs are fixed by the saved PRM; another set would need a new head.
            raise ValueError(
                f"step_features {list(config.step_features)} differ from the saved PRM's {list(saved)} ({source})"
            )
        if config.backbone_layers is not None and config.backbone_layers != model.prm_config.backbone_layers:
            kept = model.prm_config.backbone_layers or "all its"
            raise ValueError(
                f"backbone_layers {config.backbone_layers}: the saved PRM keeps {kept} layers ({source}); "
                "a PRM is cut when it is first built"
            )
    else:
        model, tokenizer = ProcessRewardModel.from_backbone(
            config.backbone,
            max_length=config.max_length,
            max_problem_tokens=config.max_problem_tokens,
            step_features=config.step_features or (),
            backbone_layers=config.backbone_layers,
            dtype=dtype,
        )
    if config.adapter == "lora":
        model.head.float()
        apply_lora(model, rank=config.lora_rank, alpha=config.lora_alpha)
    else:
        freeze_lower_layers(model, config.freeze_layers or 0)
    return model, tokenizer


def class_weights(sequences: Sequence[LabeledSequence], classes: int) -> torch.Tensor:
    """total / (present classes x count) per class; 0 for a class with no label.

    A label counts by its loss weight, so that after weighting each present class carries
    the same share of the loss: ten outcome labels of weight 0.1 count as one label.
    """
    counts = torch.zeros(classes, dtype=torch.float64)
    for sequence in sequences:
        for label, weight in zip(sequence.label_classes, sequence.weights(), strict=True):
            counts[label] += weight
    present = counts > 0
    weights = torch.zeros(classes, dtype=torch.float64)
    weights[present] = counts.sum() / (int(present.sum()) * counts[present])
    return weights.float()


class ForeignRunError(RuntimeError):
    """The output directory holds the files of another training run; nothing was touched."""


def data_fingerprint(train: Sequence[LabeledSequence], validation: Sequence[LabeledSequence]) -> str:
    """sha256 of exactly what the run trains and validates on (ids and labels, in order)."""
    digest = hashlib.sha256()
    for part, sequences in (("train", train), ("validation", validation)):
        digest.update(part.encode())
        for sequence in sequences:
            record: list[Any] = [sequence.input_ids, sequence.label_positions, sequence.label_classes]
            # Only when some weight is not 1, so that runs without weights keep their fingerprint.
            if sequence.label_weights is not None and any(w != 1.0 for w in sequence.label_weights):
                record.append(sequence.label_weights)
            digest.update(json.dumps(record).encode() + b"\n")
    return digest.hexdigest()


def output_dir_claim(output_dir: Path, manifest: dict[str, str]) -> None:
    """Make ``output_dir`` this run's before anything in it is read or written.

    Ids of database rows are reused after a restore or a recreated database, so a
    directory named after a row could hold another run's checkpoints; resuming from them
    would train nothing and report someone else's model as this run's. A directory is
    adopted only when its manifest names this run. The same run with other data or
    another backbone (labels arrived between a crash and the retry) starts over.
    """
    path = output_dir / RUN_MANIFEST_FILE
    trained = [
        p for p in output_dir.iterdir() if p.name in (FINAL_DIR, RESULT_FILE) or p.name.startswith(CHECKPOINT_PREFIX)
    ]
    if path.exists():
        found = json.loads(path.read_text())
        if found.get("run_id") != manifest["run_id"]:
            raise ForeignRunError(
                f"{output_dir} belongs to training run {found.get('run_id')!r}, not {manifest['run_id']!r}; "
                "refusing to resume from or overwrite it"
            )
        if found == manifest:
            return
        logger.warning("%s: same run, different data or backbone than its checkpoints; starting over", output_dir)
        for stale in trained:
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
    elif trained:
        raise ForeignRunError(
            f"{output_dir} holds checkpoints without a run manifest (another run's, or from before manifests); "
            "refusing to resume from or overwrite them"
        )
    _write_atomically(path, json.dumps(manifest, indent=1, sort_keys=True))


def train_prm(
    solutions: Sequence[TrainingItem],
    config: TrainConfig,
    *,
    validation: Sequence[TrainingItem] | None = None,
    progress: ProgressCallback | None = None,
    on_epoch: Callable[[EpochReport], None] | None = None,
    run_id: str | None = None,
    selection_pool: Sequence[OutcomeSolution] = (),
) -> TrainResult:
    """Train, checkpointing into ``config.output_dir``; resumes if a checkpoint is there.

    With ``run_id`` (the product always passes one) the directory must be this run's: its
    manifest must name the run, backbone and data, or ``ForeignRunError`` is raised before
    anything is read (see ``output_dir_claim``). Without one, a checkpoint made with
    another seed is refused, as before.

    With ``validation=None`` the solutions are split by problem id (``val_fraction``), so a
    problem never lands on both sides. After every epoch the validation set is evaluated
    (``on_epoch`` gets the report); at the end its labeled solutions choose the
    first-error threshold, and ``selection_pool`` (graded solutions of the validation
    problems) the solution aggregation (``calibration``).

    Items may mix human-labeled solutions (``LabeledSolution``, ``StepExample``) and
    answer-labeled ones (``OutcomeSolution``; ``config.outcome_weight`` and
    ``outcome_targets`` say how they count). With ``config.objective="outcome"`` the
    model is an ORM: only ``OutcomeSolution`` items, each labeled at its final step; its
    validation AUROC is that of the final-step score against answer correctness, and its
    calibration is fixed (``outcome_calibration``).
    """
    started = time.monotonic()
    config, plan = config.planned()
    assert config.num_epochs is not None and config.learning_rate is not None
    output_dir = Path(config.output_dir)
    cuda, bf16, checkpointing = config.uses_cuda, config.uses_bf16, config.uses_gradient_checkpointing
    # A trained backbone fine-tuned in full by several processes is sharded (FSDP); LoRA
    # and single-process runs keep whole copies.
    sharded = plan.full is not None and plan.adapter == "full" and world_size() > 1
    accelerator = _accelerator(config, sharded=sharded, bf16=bf16)
    logger.info("training: %s", plan.reason)
    if accelerator.is_main_process:
        output_dir.mkdir(parents=True, exist_ok=True)

    if validation is None:
        train_items, val_items = split_by_problem(list(solutions), config.val_fraction, config.split_salt)
    else:
        train_items, val_items = list(solutions), list(validation)
    train_examples, human_labels, outcome_labels = _prepare_examples(train_items, config)
    val_examples, _, _ = _prepare_examples(val_items, config)
    if not train_examples:
        raise ValueError("no training examples")
    labels_by_source = (human_labels, outcome_labels)

    # Seeded before building so the fresh head's initialisation is reproducible.
    set_seed(config.seed)
    model, tokenizer = _build_model(config)
    # What the saved model is: a PRM trained on from an ORM (or back) becomes what this run trains.
    model.prm_config.objective = config.objective
    if checkpointing:
        model.enable_gradient_checkpointing()
    encoder = model.step_encoder(tokenizer)
    train_sequences = encode_examples(encoder, train_examples)
    val_sequences = encode_examples(encoder, val_examples)
    if accelerator.is_main_process:
        if run_id is not None:
            output_dir_claim(
                output_dir,
                {
                    "run_id": run_id,
                    "base_model": config.backbone,
                    "data_fingerprint": data_fingerprint(train_sequences, val_sequences),
                },
            )
        sweep_scratch(output_dir)
    accelerator.wait_for_everyone()
    if config.class_weighting == "balanced":
        model.class_weights = class_weights(train_sequences, len(model.prm_config.label_names))
    elif config.class_weighting != "none":
        raise ValueError(f"class_weighting must be 'balanced' or 'none', got {config.class_weighting!r}")
    if backbone_is_frozen(model):
        return _train_head_only(
            config, model, tokenizer, train_sequences, val_sequences, val_items, encoder.pad_id, started, progress,
            on_epoch, labels_by_source, selection_pool,
        )  # fmt: skip
    # Multiples of 8 let tensor cores run at full speed; on CPU it would only add padding.
    collator = TrainingCollator(pad_id=encoder.pad_id, pad_to_multiple_of=8 if cuda else 1)

    sampler = EpochBatchSampler(
        [len(s.input_ids) for s in train_sequences], config.batch_size, config.mega_batch_batches, config.seed
    )
    # A private generator: creating a DataLoader iterator otherwise draws from the global
    # torch RNG, so a resumed run (one extra iterator) would get different dropout masks.
    train_loader = DataLoader(
        _ListDataset(train_sequences), batch_sampler=sampler, collate_fn=collator, generator=torch.Generator()
    )
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=config.learning_rate, weight_decay=config.weight_decay)
    if sharded:
        # One FSDP unit per transformer block: a block's weights are gathered just before it runs.
        blocks = transformer_blocks(model)
        assert blocks is not None and accelerator.state.fsdp_plugin is not None
        accelerator.state.fsdp_plugin.transformer_cls_names_to_wrap = [type(blocks[0]).__name__]
    model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
    lora = has_adapters(accelerator.unwrap_model(model))
    if lora:
        _checkpoint_trainable_only(accelerator, model)

    micro_per_epoch = len(train_loader)
    accumulation = max(1, config.gradient_accumulation_steps)
    steps_per_epoch = math.ceil(micro_per_epoch / accumulation)
    total_steps = steps_per_epoch * config.num_epochs
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)
    # Not passed through accelerator.prepare: that wrapper steps once per process, which
    # assumes a step count computed on the unsharded loader; ours is per process already.
    scheduler = get_scheduler(
        config.lr_scheduler,
        optimizer,
        num_warmup_steps=int(config.warmup_ratio * total_steps),
        num_training_steps=total_steps,
    )
    accelerator.register_for_checkpointing(scheduler)

    state = _State(data_seed=config.seed)
    resume_dir = latest_checkpoint(output_dir)
    if resume_dir is not None:
        # A LoRA checkpoint holds the adapters and the head; the frozen weights are the backbone's.
        accelerator.load_state(str(resume_dir), **({"strict": False} if lora else {}))
        saved = json.loads((resume_dir / TRAINER_STATE_FILE).read_text())
        state = _State(
            step=saved["step"],
            examples_seen=saved["examples_seen"],
            labeled_steps_seen=saved["labeled_steps_seen"],
            data_seed=saved["data_seed"],
            loss_curve=[(int(s), float(v)) for s, v in saved["loss_curve"]],
            epochs=list(saved.get("epochs", [])),
        )
        if state.data_seed != config.seed:
            raise ValueError(f"checkpoint {resume_dir} was made with seed {state.data_seed}, config has {config.seed}")
        logger.info("resuming from %s at step %d", resume_dir, state.step)
    resumed_from = state.step

    model.train()
    while state.step < total_steps:
        epoch, step_in_epoch = divmod(state.step, steps_per_epoch)
        sampler.epoch = epoch
        first_micro = step_in_epoch * accumulation
        loader = accelerator.skip_first_batches(train_loader, first_micro) if first_micro else train_loader
        group_loss = torch.zeros((), device=accelerator.device)
        group_counts = torch.zeros(2, dtype=torch.long, device=accelerator.device)
        for micro, batch in enumerate(loader, start=first_micro):
            group_start = (micro // accumulation) * accumulation
            group_size = min(accumulation, micro_per_epoch - group_start)
            closes_group = micro - group_start + 1 == group_size
            # Skipping the gradient all-reduce on non-final micro-batches is the point of
            # accumulation under DDP.
            sync: AbstractContextManager[Any] = nullcontext() if closes_group else accelerator.no_sync(model)
            with sync:
                loss = model(**batch).loss
                accelerator.backward(loss / group_size)
            group_loss += loss.detach() / group_size
            group_counts[0] += batch["input_ids"].shape[0]
            group_counts[1] += (batch["labels"] != -100).sum()
            if not closes_group:
                continue
            if config.max_grad_norm > 0:
                accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step_loss = float(accelerator.reduce(group_loss, "mean").item())
            counts = accelerator.reduce(group_counts, "sum")
            state.step += 1
            state.examples_seen += int(counts[0].item())
            state.labeled_steps_seen += int(counts[1].item())
            state.loss_curve.append((state.step, step_loss))
            group_loss.zero_()
            group_counts.zero_()
            if state.step % steps_per_epoch == 0 or state.step == total_steps:
                report = _epoch_report(accelerator, model, val_sequences, collator, config.eval_batch_size, state)
                state.epochs.append(asdict(report))
                if on_epoch is not None and accelerator.is_main_process:
                    on_epoch(report)
            if config.checkpoint_every and state.step % config.checkpoint_every == 0:
                _save_checkpoint(accelerator, output_dir, state, config.keep_checkpoints)
            if progress is not None and accelerator.is_main_process:
                progress(state.step, total_steps, step_loss)
            if state.step >= total_steps:
                break

    if not state.epochs or state.epochs[-1]["step"] != state.step:
        state.epochs.append(
            asdict(_epoch_report(accelerator, model, val_sequences, collator, config.eval_batch_size, state))
        )
    last = state.epochs[-1]
    final_dir = output_dir / FINAL_DIR
    unwrapped = accelerator.unwrap_model(model)
    assert isinstance(unwrapped, ProcessRewardModel)
    # Sharded weights are gathered by every process together; the main process saves them.
    full_state = accelerator.get_state_dict(model) if sharded else None
    if lora:
        # Calibrated and saved as merged: exactly the model a later load scores with.
        merge_adapters(unwrapped)
    calibration = None
    if config.objective == "outcome":
        calibration = outcome_calibration(len(val_items))
    elif accelerator.is_main_process or sharded:
        # Under FSDP every process runs the same forward passes (each gathers the blocks
        # it does not hold); only the main process's result is kept.
        calibration = _calibrate_process(unwrapped, tokenizer, val_items, config, selection_pool)
    result = TrainResult(
        final_dir=final_dir,
        train_loss_curve=state.loss_curve,
        val_loss=last["val_loss"],
        val_accuracy=last["val_accuracy"],
        val_labeled_steps=last["val_labeled_steps"],
        val_majority_accuracy=last["val_majority_accuracy"],
        val_auroc=last["val_auroc"],
        epochs=state.epochs,
        calibration=calibration,
        examples_seen=state.examples_seen,
        labeled_steps_seen=state.labeled_steps_seen,
        optimizer_steps=state.step,
        resumed_from_step=resumed_from,
        duration_s=time.monotonic() - started,
        hyperparameters=config.hyperparameters(),
        human_labels=labels_by_source[0],
        outcome_labels=labels_by_source[1],
        memory=plan.to_json(),
    )
    if accelerator.is_main_process:
        unwrapped.save_pretrained(final_dir, tokenizer, state_dict=full_state)
        _write_atomically(output_dir / RESULT_FILE, result.to_json())
    accelerator.wait_for_everyone()
    return result


def _accelerator(config: TrainConfig, *, sharded: bool, bf16: bool) -> Accelerator:
    precision = "bf16" if bf16 else "no"
    if not sharded:
        return Accelerator(mixed_precision=precision, cpu=config.cpu)
    from accelerate import FullyShardedDataParallelPlugin
    from accelerate.state import AcceleratorState, PartialState

    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2,
        auto_wrap_policy="transformer_based_wrap",
        reshard_after_forward=True,
        # Each process writes its own shard of a checkpoint: no process ever holds them all.
        state_dict_type="SHARDED_STATE_DICT",
    )
    accelerator = Accelerator(mixed_precision=precision, cpu=config.cpu, fsdp_plugin=plugin)
    if accelerator.distributed_type != DistributedType.FSDP:
        # accelerate offers FSDP on accelerators only, while torch's FSDP2 shards CPU
        # processes over gloo as well: switched on here by hand, the CPU run (the test
        # suite's) goes through the very code path a GPU run takes.
        for shared in (PartialState._shared_state, AcceleratorState._shared_state):
            shared["distributed_type"] = DistributedType.FSDP
        AcceleratorState._shared_state["fsdp_plugin"] = plugin
    return accelerator


def _checkpoint_trainable_only(accelerator: Accelerator, model: torch.nn.Module) -> None:
    """Intermediate checkpoints of a LoRA run keep the adapters and the head alone: the
    frozen backbone (14 GB for a 7B in bf16) is the base model's, unchanged."""
    trainable = {name for name, parameter in model.named_parameters() if parameter.requires_grad}

    def keep_trainable(models: list[torch.nn.Module], weights: list[dict[str, Any]], output_dir: str) -> None:
        for index, state in enumerate(weights):
            weights[index] = {name: value for name, value in state.items() if name in trainable}

    accelerator.register_save_state_pre_hook(keep_trainable)


def _calibrate_process(
    model: ProcessRewardModel,
    tokenizer: PreTrainedTokenizerBase,
    val_items: Sequence[TrainingItem],
    config: TrainConfig,
    pool: Sequence[OutcomeSolution],
) -> dict[str, Any] | None:
    """Threshold from the human-labeled validation solutions (outcome solutions carry no
    first error to choose a threshold on), aggregation fixed by ``config`` or chosen on the
    validation problems' graded ``pool``."""
    labeled_validation = [item for item in val_items if isinstance(item, LabeledSolution)]
    if not labeled_validation:
        return None
    fixed = None if config.aggregation in (None, CHOOSE_AGGREGATION) else cast(Reduction, config.aggregation)
    found = calibrate(
        model,
        tokenizer,
        labeled_validation,
        batch_size=config.eval_batch_size,
        pool=pool,
        aggregation=fixed,
        threshold_decay=config.threshold_decay or 0.0,
    )
    return found.to_json() if found is not None else None


def _train_head_only(
    config: TrainConfig,
    model: ProcessRewardModel,
    tokenizer: PreTrainedTokenizerBase,
    train_sequences: Sequence[LabeledSequence],
    val_sequences: Sequence[LabeledSequence],
    val_items: Sequence[TrainingItem],
    pad_id: int,
    started: float,
    progress: ProgressCallback | None,
    on_epoch: Callable[[EpochReport], None] | None,
    labels_by_source: tuple[int, int],
    selection_pool: Sequence[OutcomeSolution],
) -> TrainResult:
    """The frozen-backbone path: features once, then the head (see ``head_training``).

    It takes seconds after the features, so it keeps no intermediate checkpoints: an
    interrupted run starts over.
    """
    assert config.num_epochs is not None and config.learning_rate is not None
    device = torch.device("cuda" if torch.cuda.is_available() and not config.cpu else "cpu")
    model.to(device)
    total = -(-sum(len(s.label_classes) for s in train_sequences) // config.batch_size) * config.num_epochs

    def alive() -> None:
        # Step 0 while the features are computed: the caller's heartbeat keeps ticking
        # through what can be the longest stretch of the run.
        if progress is not None:
            progress(0, total, math.nan)

    # The separator id lets the features come through the feature cache (``feature_cache``).
    separator = model.step_encoder(tokenizer).separator_id
    train_features = with_label_weights(
        separator_features(model, train_sequences, pad_id, device, on_batch=alive, separator_id=separator),
        train_sequences,
    )
    val_features = separator_features(model, val_sequences, pad_id, device, on_batch=alive, separator_id=separator)
    model.to("cpu")
    epochs: list[dict[str, Any]] = []

    def epoch_done(
        report: HeadEpoch, head_l2: float | None = None, head_l2_val_aurocs: dict[str, float | None] | None = None
    ) -> None:
        epoch = EpochReport(
            epoch=len(epochs) + 1,
            step=report.step,
            train_loss=report.train_loss,
            val_loss=report.val_loss,
            val_accuracy=report.val_accuracy,
            val_majority_accuracy=report.val_majority_accuracy,
            val_auroc=report.val_auroc,
            val_labeled_steps=report.val_labeled_steps,
            head_l2=head_l2,
            head_l2_val_aurocs=head_l2_val_aurocs,
        )
        epochs.append(asdict(epoch))
        if on_epoch is not None:
            on_epoch(epoch)

    if config.head_l2:
        fit = fit_penalised_head(
            model, train_features, val_features, penalties=config.head_l2, class_weights=model.class_weights
        )
        curve = fit.curve
        # The penalised fit is reported as the one epoch it is.
        epoch_done(fit.report, fit.penalty, {str(k): v for k, v in fit.val_aurocs.items()})
    else:
        curve = fit_head(
            model,
            train_features,
            val_features,
            epochs=config.num_epochs,
            batch_size=config.batch_size,
            learning_rate=config.learning_rate,
            weight_decay=config.weight_decay,
            class_weights=model.class_weights,
            seed=config.seed,
            on_step=progress,
            on_epoch=epoch_done,
        )
    final_dir = Path(config.output_dir) / FINAL_DIR
    calibration = (
        outcome_calibration(len(val_items))
        if config.objective == "outcome"
        else _calibrate_process(model, tokenizer, val_items, config, selection_pool)
    )
    last = epochs[-1]
    result = TrainResult(
        final_dir=final_dir,
        train_loss_curve=curve,
        val_loss=last["val_loss"],
        val_accuracy=last["val_accuracy"],
        val_labeled_steps=last["val_labeled_steps"],
        val_majority_accuracy=last["val_majority_accuracy"],
        val_auroc=last["val_auroc"],
        epochs=epochs,
        calibration=calibration,
        examples_seen=len(train_sequences) * config.num_epochs,
        labeled_steps_seen=len(train_features.classes) * config.num_epochs,
        optimizer_steps=len(curve),
        resumed_from_step=0,
        duration_s=time.monotonic() - started,
        hyperparameters=config.hyperparameters(),
        human_labels=labels_by_source[0],
        outcome_labels=labels_by_source[1],
    )
    model.save_pretrained(final_dir, tokenizer)
    _write_atomically(Path(config.output_dir) / RESULT_FILE, result.to_json())
    return result


class _ListDataset(torch.utils.data.Dataset[LabeledSequence]):
    def __init__(self, items: Sequence[LabeledSequence]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> LabeledSequence:
        return self.items[index]


def _save_checkpoint(accelerator: Accelerator, output_dir: Path, state: _State, keep: int) -> None:
    # Every process writes its own RNG state into the same scratch dir, so the name must
    # be deterministic (not a uuid); only the main process renames it into place.
    target = output_dir / f"{CHECKPOINT_PREFIX}{state.step:08d}"
    scratch = output_dir / f".tmp-{target.name}"
    if accelerator.is_main_process:
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(scratch))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        payload = asdict(state)
        (scratch / TRAINER_STATE_FILE).write_text(json.dumps(payload))
        for path in scratch.rglob("*"):
            if path.is_file():
                with open(path, "rb") as handle:
                    os.fsync(handle.fileno())
        if target.exists():
            shutil.rmtree(target)
        os.replace(scratch, target)
        checkpoints = sorted(
            (p for p in output_dir.iterdir() if re.fullmatch(rf"{CHECKPOINT_PREFIX}\d+", p.name)),
            key=lambda p: p.name,
        )
        for old in checkpoints[: max(0, len(checkpoints) - max(1, keep))]:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()


def _write_atomically(path: Path, text: str) -> None:
    scratch = path.with_name(f".tmp-{path.name}")
    scratch.write_text(text)
    os.replace(scratch, path)


def _epoch_report(
    accelerator: Accelerator,
    model: torch.nn.Module,
    sequences: Sequence[LabeledSequence],
    collator: TrainingCollator,
    batch_size: int,
    state: _State,
) -> EpochReport:
    losses = [loss for step, loss in state.loss_curve if step > (state.epochs[-1]["step"] if state.epochs else 0)]
    validation = _validate(accelerator, model, sequences, collator, batch_size)
    return EpochReport(
        epoch=len(state.epochs) + 1,
        step=state.step,
        train_loss=sum(losses) / len(losses) if losses else None,
        val_loss=validation.loss,
        val_accuracy=validation.accuracy,
        val_majority_accuracy=validation.majority_accuracy,
        val_auroc=validation.auroc,
        val_labeled_steps=validation.count,
    )


@dataclass(frozen=True)
class _Validation:
    loss: float | None = None
    accuracy: float | None = None
    majority_accuracy: float | None = None
    auroc: float | None = None
    count: int = 0


def _gather_labels(accelerator: Accelerator, values: torch.Tensor) -> torch.Tensor:
    """Per-label values of every process, all of them.

    Not ``gather_for_metrics``: it cuts its input to the remainder of the last batch of
    the dataloader it takes for the active one, which counts sequences, not labels, and
    when validation runs at the end of a training epoch is the training loader's. That
    left a fine-tuning run's epoch report on 3 of 972 validation labels.
    """
    if accelerator.num_processes == 1:
        return values
    counts = accelerator.gather(torch.tensor([values.numel()], device=accelerator.device)).tolist()
    padded = accelerator.pad_across_processes(values.to(accelerator.device), dim=0)
    width = padded.shape[0]
    gathered = accelerator.gather(padded)
    return torch.cat([gathered[rank * width : rank * width + int(n)] for rank, n in enumerate(counts)])


def _validate(
    accelerator: Accelerator,
    model: torch.nn.Module,
    sequences: Sequence[LabeledSequence],
    collator: TrainingCollator,
    batch_size: int,
) -> _Validation:
    if not sequences:
        return _Validation()
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i].input_ids))
    batches = [order[k : k + batch_size] for k in range(0, len(order), batch_size)]
    loader = accelerator.prepare_data_loader(
        DataLoader(_ListDataset(sequences), batch_sampler=batches, collate_fn=collator)
    )
    loss_sum = torch.zeros((), dtype=torch.float64, device=accelerator.device)
    fine_probability: list[torch.Tensor] = []
    predicted: list[torch.Tensor] = []
    truth: list[torch.Tensor] = []
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        for batch in loader:
            output = model(**batch)
            targets = batch["labels"][batch["labels"] != IGNORE_INDEX]
            assert output.loss is not None
            # The loss is class-weighted; the unweighted one is comparable across runs.
            loss_sum += torch.nn.functional.cross_entropy(output.logits.float(), targets, reduction="sum").double()
            probabilities = torch.softmax(output.logits.float(), dim=-1)
            fine_probability.append(1.0 - probabilities[:, NEGATIVE])
            predicted.append(output.logits.argmax(dim=-1))
            truth.append(targets)
    model.train(was_training)
    # Under several processes the sharded loader may repeat a few batches to even out
    # the shards; the skew is at most a handful of sequences.
    scores = _gather_labels(accelerator, torch.cat(fine_probability) if fine_probability else torch.zeros(0))
    labels = _gather_labels(accelerator, torch.cat(truth) if truth else torch.zeros(0, dtype=torch.long))
    guesses = _gather_labels(accelerator, torch.cat(predicted) if predicted else torch.zeros(0, dtype=torch.long))
    loss_total = float(accelerator.reduce(loss_sum, "sum").item())
    count = int(labels.numel())
    if count == 0:
        return _Validation()
    labels_cpu = labels.cpu()
    majority = float(torch.bincount(labels_cpu).max().item() / count)
    fine = (labels_cpu != NEGATIVE).tolist()
    step_auroc = auroc(scores.cpu().tolist(), fine) if 0 < sum(fine) < count else None
    return _Validation(
        loss=loss_total / count,
        accuracy=float((guesses.cpu() == labels_cpu).float().mean().item()),
        majority_accuracy=majority,
        auroc=step_auroc,
        count=count,
    )
