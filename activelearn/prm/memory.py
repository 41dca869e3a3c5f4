"""How much memory one training process needs, and whether full fine-tuning or LoRA fits.

The estimate is read from the backbone's config, without loading a weight:

* **parameters**: counted exactly on a PRM built on PyTorch's meta device (shapes, no
  storage) the way training builds it: lower layers frozen (``freeze_layers``) or LoRA
  adapters on every linear layer, the head included;
* **weights, gradients, optimizer state**: parameters x bytes. Full fine-tuning keeps
  float32 master weights (4 bytes), float32 gradients (4) and AdamW's two moments (8):
  16 bytes a trainable parameter. LoRA keeps the frozen backbone in bf16 (2 bytes) when
  training under bf16, else float32, and 16 bytes for each adapter and head parameter.
  Under FSDP all three are split across the processes;
* **activations**: what autograd keeps for the backward pass of one micro-batch of
  ``batch_size`` sequences of ``max_length`` tokens (padding counts: a batch is as wide as
  its longest sequence, and the recipe's length bounds it). Per token and layer a
  Llama/Qwen2-type decoder layer keeps 11 x hidden + 4 x intermediate values (norm inputs
  and outputs, residuals, q/k/v after rotary, the attention output, the gated MLP's four
  intermediate-wide tensors), a BERT-type layer 11 x hidden + 2 x intermediate + 3 x heads
  x length (its attention probabilities, their dropout mask and dropped copy): the tensors
  autograd saves in transformers' layers with SDPA attention, counted with
  ``saved_tensors_hooks`` on the PRM's forward pass. The embedding output and the head's
  inputs are small beside them. With gradient checkpointing a layer keeps only its input,
  and one layer's activations are rebuilt at a time during the backward pass;
* **transients**: while a layer runs backward without checkpointing, the gradients of its
  activations; the optimizer step's temporaries (CUDA's multi-tensor AdamW makes one
  float32 copy of the trainable parameters; the CPU's one-tensor-at-a-time AdamW two of
  the largest); under bf16 autocast the bf16 copies of the weights a forward pass casts;
  under FSDP the gathered parameters of the two layers in flight.

Gradients are freed after each optimizer step, so with one micro-batch per step they grow
only as the backward pass frees activations; with several they are held through the next
micro-batch's forward pass. The peak is weights + optimizer state + the larger of
(activations + their transients, + gradients when accumulating) and (gradients + the
optimizer step's temporaries). Values are bytes unless named GiB.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import torch

logger = logging.getLogger(__name__)

Adapter = Literal["auto", "full", "lora"]
ADAPTERS: tuple[str, ...] = ("auto", "full", "lora")
GIB = 1024**3
# Of a GPU's memory, what training may plan on: the CUDA context, cuBLAS workspaces and
# the caching allocator's fragmentation take the rest.
USABLE_GPU_FRACTION = 0.9
# Of the host's available memory, on a CPU run.
USABLE_HOST_FRACTION = 0.8

# Values autograd keeps per token, per layer (see the module docstring). Decoder: Llama,
# Qwen2, Mistral and the like (RMSNorm, rotary, gated MLP).
DECODER_PER_LAYER_HIDDEN = 11.0
DECODER_PER_LAYER_INTERMEDIATE = 4.0
# BERT-type encoders (LayerNorm, GELU MLP, attention probabilities and their dropout mask).
ENCODER_PER_LAYER_HIDDEN = 11.0
ENCODER_PER_LAYER_INTERMEDIATE = 2.0
ENCODER_PER_LAYER_HEADS_LENGTH = 3.0
# The embedding output, the final norm's and the head's inputs: one hidden-wide tensor.
OUTSIDE_LAYERS_HIDDEN = 1.0
# What backward adds without checkpointing, as a share of one layer's activations: the
# gradients of the activations of the layer running backward (measured on the CPU shapes
# of the tests; with checkpointing the rebuilt layer is that working set).
BACKWARD_WORKING_SET = 0.25


class TrainingMemoryError(ValueError):
    """No way of training this configuration fits the device's memory."""


@dataclass(frozen=True)
class Shape:
    """What the activation count needs from a backbone's config."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    encoder: bool

    @classmethod
    def of(cls, config: Any) -> Shape:
        from activelearn.prm.recipes import ENCODER_MODEL_TYPES

        hidden = int(config.hidden_size)
        return cls(
            hidden=hidden,
            intermediate=int(getattr(config, "intermediate_size", 4 * hidden)),
            layers=int(config.num_hidden_layers),
            heads=int(config.num_attention_heads),
            encoder=str(getattr(config, "model_type", "")) in ENCODER_MODEL_TYPES,
        )

    def layer_values_per_token(self, length: int) -> float:
        if self.encoder:
            return (
                ENCODER_PER_LAYER_HIDDEN * self.hidden
                + ENCODER_PER_LAYER_INTERMEDIATE * self.intermediate
                + ENCODER_PER_LAYER_HEADS_LENGTH * self.heads * length
            )
        return DECODER_PER_LAYER_HIDDEN * self.hidden + DECODER_PER_LAYER_INTERMEDIATE * self.intermediate

    def outside_values_per_token(self) -> float:
        return OUTSIDE_LAYERS_HIDDEN * self.hidden


@dataclass(frozen=True)
class Parameters:
    total: int
    trainable: int
    largest_trainable: int  # elements of the largest trainable tensor
    per_layer: int  # parameters of one transformer block


def count_parameters(
    config: Any, *, adapter: Literal["full", "lora"], freeze_layers: int, lora_rank: int, lora_alpha: int
) -> Parameters:
    """Parameters of the PRM training would build on ``config``, counted on the meta device."""
    from transformers import AutoModel

    from activelearn.prm.adapters import apply_lora
    from activelearn.prm.freezing import freeze_lower_layers, transformer_blocks
    from activelearn.prm.modeling import PRMConfig, ProcessRewardModel

    with torch.device("meta"):
        backbone = AutoModel.from_config(config)  # type: ignore[no-untyped-call]
        model = ProcessRewardModel(backbone, PRMConfig(base_model="meta", hidden_size=int(config.hidden_size)))
    blocks = transformer_blocks(model)
    per_layer = sum(p.numel() for p in blocks[0].parameters()) if blocks is not None and len(blocks) else 0
    if adapter == "lora":
        apply_lora(model, rank=lora_rank, alpha=lora_alpha)
    else:
        freeze_lower_layers(model, freeze_layers)
    trainable = [p.numel() for p in model.parameters() if p.requires_grad]
    return Parameters(
        total=sum(p.numel() for p in model.parameters()),
        trainable=sum(trainable),
        largest_trainable=max(trainable, default=0),
        per_layer=per_layer,
    )


@dataclass(frozen=True)
class MemoryEstimate:
    adapter: Literal["full", "lora"]
    processes: int
    sharded: bool  # FSDP: weights, gradients and optimizer state split across the processes
    batch_size: int
    max_length: int
    gradient_accumulation_steps: int
    gradient_checkpointing: bool
    bf16: bool
    parameters: int
    trainable_parameters: int
    weights: int
    gradients: int
    optimizer: int
    activations: int
    backward_transient: int
    step_transient: int

    @property
    def peak(self) -> int:
        backward = self.activations + self.backward_transient
        if self.gradient_accumulation_steps > 1:
            backward += self.gradients
        return self.weights + self.optimizer + max(backward, self.gradients + self.step_transient)

    def describe(self) -> str:
        parts = ", ".join(
            f"{name} {_gib(value)}"
            for name, value in (
                ("weights", self.weights),
                ("gradients", self.gradients),
                ("optimizer", self.optimizer),
                ("activations", self.activations + self.backward_transient),
            )
        )
        how = "LoRA" if self.adapter == "lora" else ("FSDP full fine-tune" if self.sharded else "full fine-tune")
        return (
            f"{how}: {_gib(self.peak)} per process ({parts}; {self.trainable_parameters:,} of "
            f"{self.parameters:,} parameters trained, batch {self.batch_size} x {self.max_length} tokens, "
            f"gradient checkpointing {'on' if self.gradient_checkpointing else 'off'})"
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "peak": self.peak}


def estimate_memory(
    config: Any,
    *,
    adapter: Literal["full", "lora"],
    batch_size: int,
    max_length: int,
    gradient_checkpointing: bool,
    bf16: bool,
    cuda: bool,
    gradient_accumulation_steps: int = 1,
    processes: int = 1,
    freeze_layers: int = 0,
    lora_rank: int = 16,
    lora_alpha: int = 32,
) -> MemoryEstimate:
    """Peak memory of one training process (see the module docstring for the model)."""
    shape = Shape.of(config)
    counts = count_parameters(
        config, adapter=adapter, freeze_layers=freeze_layers, lora_rank=lora_rank, lora_alpha=lora_alpha
    )
    sharded = adapter == "full" and processes > 1
    split = processes if sharded else 1
    frozen = counts.total - counts.trainable
    frozen_bytes = 2 if adapter == "lora" and bf16 else 4
    weights = (counts.trainable * 4 + frozen * frozen_bytes) // split
    gradients = counts.trainable * 4 // split
    optimizer = counts.trainable * 8 // split

    length = max_length
    tokens = batch_size * length
    # Under bf16 autocast the residual stream and the norms stay float32 while the matmul
    # inputs are saved again as bf16 copies; with bf16 weights (LoRA) most of it is bf16.
    value_bytes = 4.0 if not bf16 else (3.0 if adapter == "lora" else 4.0)
    layer = shape.layer_values_per_token(length) * tokens * value_bytes
    outside = shape.outside_values_per_token() * tokens * value_bytes
    if gradient_checkpointing:
        # Each layer keeps its input; one layer's activations are rebuilt at a time.
        activations = shape.layers * shape.hidden * tokens * value_bytes + layer + outside
        backward = 0.0
    else:
        activations = shape.layers * layer + outside
        backward = BACKWARD_WORKING_SET * layer
    if bf16 and adapter == "full":
        # Autocast's bf16 weight copies: all of them saved for backward, or one layer's
        # when the layer is recomputed.
        backward += 2 * (counts.per_layer if gradient_checkpointing else counts.total)
    if sharded:
        backward += 2 * counts.per_layer * (2 if bf16 else 4)
    # CUDA's multi-tensor AdamW: a float32 copy of the (local) trainable parameters; the
    # CPU's one tensor at a time: two copies of the largest.
    step = counts.trainable * 4 // split if cuda else 2 * counts.largest_trainable * 4
    return MemoryEstimate(
        adapter=adapter,
        processes=processes,
        sharded=sharded,
        batch_size=batch_size,
        max_length=max_length,
        gradient_accumulation_steps=gradient_accumulation_steps,
        gradient_checkpointing=gradient_checkpointing,
        bf16=bf16,
        parameters=counts.total,
        trainable_parameters=counts.trainable,
        weights=int(weights),
        gradients=int(gradients),
        optimizer=int(optimizer),
        activations=int(activations),
        backward_transient=int(backward),
        step_transient=int(step),
    )


@dataclass(frozen=True)
class DeviceMemory:
    name: str
    total: int
    usable: int

    def describe(self) -> str:
        return f"{self.name} with {_gib(self.total)}, {_gib(self.usable)} usable for training"


def device_memory(*, cuda: bool) -> DeviceMemory:
    """What one training process may plan on: the smallest visible GPU's memory, or the
    host's available memory on a CPU run."""
    if cuda:
        sizes = [
            (torch.cuda.get_device_properties(i).total_memory, torch.cuda.get_device_name(i))
            for i in range(torch.cuda.device_count())
        ]
        total, name = min(sizes)
        return DeviceMemory(name=name, total=int(total), usable=int(total * USABLE_GPU_FRACTION))
    import psutil

    available = int(psutil.virtual_memory().available)
    return DeviceMemory(name="host memory", total=available, usable=int(available * USABLE_HOST_FRACTION))


@dataclass(frozen=True)
class AdapterPlan:
    """Full fine-tuning or LoRA, and the numbers that chose it."""

    adapter: Literal["full", "lora"]
    reason: str
    device: DeviceMemory | None = None
    full: MemoryEstimate | None = None
    lora: MemoryEstimate | None = None

    @property
    def trains_backbone(self) -> bool:
        """False when the backbone is frozen and only the head trains (nothing estimated)."""
        return self.full is not None or self.lora is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "adapter": self.adapter,
            "reason": self.reason,
            "device": None if self.device is None else asdict(self.device),
            "full": None if self.full is None else self.full.to_json(),
            "lora": None if self.lora is None else self.lora.to_json(),
        }


def choose_adapter(
    requested: Adapter,
    config: Any,
    device: DeviceMemory,
    *,
    batch_size: int,
    max_length: int,
    gradient_accumulation_steps: int,
    gradient_checkpointing: bool,
    bf16: bool,
    cuda: bool,
    processes: int,
    freeze_layers: int,
    lora_rank: int,
    lora_alpha: int,
) -> AdapterPlan:
    """``auto``: full fine-tuning when its estimate fits ``device``, else LoRA when that
    fits, else ``TrainingMemoryError`` with the numbers. ``full`` or ``lora``: that, whatever
    the estimate says (a warning when it does not fit)."""
    common: dict[str, Any] = dict(
        batch_size=batch_size,
        max_length=max_length,
        gradient_accumulation_steps=gradient_accumulation_steps,
        gradient_checkpointing=gradient_checkpointing,
        bf16=bf16,
        cuda=cuda,
        processes=processes,
        freeze_layers=freeze_layers,
        lora_rank=lora_rank,
        lora_alpha=lora_alpha,
    )
    full = estimate_memory(config, adapter="full", **common) if requested in ("auto", "full") else None
    if requested == "full" or (full is not None and full.peak <= device.usable):
        assert full is not None
        fits = full.peak <= device.usable
        if not fits:
            logger.warning("adapter=full asked for, but %s exceeds %s", full.describe(), device.describe())
        reason = "asked for" if requested == "full" else "its estimate fits"
        return AdapterPlan("full", f"full fine-tune: {reason}", device, full=full)
    lora = estimate_memory(config, adapter="lora", **common)
    if requested == "lora":
        if lora.peak > device.usable:
            logger.warning("adapter=lora asked for, but %s exceeds %s", lora.describe(), device.describe())
        return AdapterPlan("lora", "LoRA: asked for", device, lora=lora)
    assert full is not None
    if lora.peak <= device.usable:
        return AdapterPlan(
            "lora", f"LoRA: the full fine-tune's {_gib(full.peak)} exceeds {_gib(device.usable)}", device, full, lora
        )
    advice = "lower batch_size (raise gradient_accumulation_steps to keep the effective batch) or max_length" + (
        "" if gradient_checkpointing else ", or turn gradient_checkpointing on"
    )
    raise TrainingMemoryError(
        f"this configuration does not fit {device.describe()}: {full.describe()}; {lora.describe()}. {advice}"
    )


def cpu_peak_bytes(run: Callable[[], object]) -> int:
    """Peak bytes held by PyTorch's CPU allocator while ``run`` runs, counting only what
    ``run`` allocates.

    Measured by the allocator itself: with ``torch.profiler``'s memory profiling on, c10's
    CPU allocator reports every allocation and free together with its running total of
    bytes allocated; the peak is the largest total it reported. Process RSS would bury a
    tiny model under the libraries, and ``tracemalloc`` never sees tensor storage.
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        run()
    with tempfile.TemporaryDirectory(prefix="cpu-peak-") as scratch:
        trace = Path(scratch) / "trace.json"
        profiler.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text()).get("traceEvents", [])
    totals = [
        int(event["args"]["Total Allocated"])
        for event in events
        if event.get("name") == "[memory]" and int(event.get("args", {}).get("Device Type", -1)) == 0
    ]
    return max(totals, default=0)


def processes_visible() -> int:
    """GPUs this worker sees (``CUDA_VISIBLE_DEVICES`` applies); 1 without CUDA."""
    return max(1, torch.cuda.device_count()) if torch.cuda.is_available() else 1


def world_size() -> int:
    """Processes of the distributed run this process belongs to (set by the launcher)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def _gib(value: float) -> str:
    gib = value / GIB
    return f"{gib:.1f} GiB" if gib >= 1 or math.isclose(gib, 0) else f"{value / 1024**2:.1f} MiB"
