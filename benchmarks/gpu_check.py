"""One prepared check of the PRM model code on a GPU: throughput, MFU, memory, bf16 agreement.

    bash benchmarks/gpu_check.sh                                   # CUDA, under 8 minutes
    bash benchmarks/gpu_check.sh --device cpu --output /tmp/c.json # CPU, tiny shapes, seconds

Everything runs through the model code (``activelearn/prm``, ``activelearn/stepgen``; no
Django) on randomly initialised Qwen2-architecture models built from a config and saved in
bfloat16 like the real checkpoints, so nothing is downloaded and no weights travel with the
checkout; throughput does not depend on the weights' values. The tokenizer is a byte-level
BPE trained here on the synthetic solutions and padded to Qwen's vocabulary size; a real
checkpoint's tokenizer has far more merges, so tokenization is a little cheaper here.

Stages (run as: 1, 2, the first size of 3 and its stage 5, stage 4, the other sizes of 3, so
the 0.5B shape is what the budget skips), each written into ``--output`` the moment it ends
(an error, an out-of-memory included, is recorded and the next stage runs):

1. ``environment``: versions, device, attention implementation, the measured matmul peak.
2. ``bf16_vs_fp32``: a tiny PRM scored in float32 on the CPU (the reference) and as the GPU
   worker scores (bfloat16 weights; on CUDA also float32 weights under bf16 autocast); passes
   when every step score and solution score is within ``BF16_TOLERANCE``.
3. Per model size (``1.5b`` and ``0.5b`` on CUDA, ``tiny`` on the CPU):
   ``scoring``: ``score_solutions`` (length-sorted batches) against ``model(...)`` on the very
   batches it builds, per batch size; ``training``: ``train_prm`` (accelerate, AdamW, float32
   master weights) with and without gradient checkpointing, against a plain loop of
   ``model(...)``, ``loss.backward()`` and AdamW on the same batches in the same order;
   ``step_generator``: ``LocalLMGenerator`` on the same weights, K samples, twice per seed.
   Both sides compute as the product does: bf16 on CUDA (bf16 weights for scoring, bf16
   autocast for training), float32 on the CPU.
4. ``lora`` (``7b`` on CUDA, ``tiny`` on the CPU): ``train_prm`` with LoRA adapters on a
   Qwen2.5-7B-shaped backbone held in bf16, gradient checkpointing on: tokens/s, MFU, peak
   memory against the memory estimate that would choose LoRA (``activelearn.prm.memory``).
5. ``fsdp`` (``1.5b``; only where several GPUs are visible, or ``--fsdp-processes N`` on
   the CPU, gloo): a full fine-tune sharded with FSDP over one process per GPU, launched as
   the pipeline launches it (``activelearn.prm.distributed``): tokens/s, MFU per GPU, the
   peak device memory NVML reports, the estimate per process.
6. ``goals`` (MFU at 1.5B against 35% training, 40% scoring; 7B LoRA against 30%) and
   ``prm800k_estimate`` (time per generation at PRM800K scale from the FLOP model, at the
   goals on an H200 and at the rates measured in this run).

FLOPs (``environment.flops`` in the JSON): N = parameters that do matmuls, everything but the
input embedding (a lookup; the PRM has no LM head), head included. A forward pass over a
sequence of s real tokens is 2*N*s + 4*L*A*s^2 (L layers, A = heads * head_dim; attention
counted in full, not halved for the causal mask, as in PaLM's MFU); training is 3x that;
gradient checkpointing's recompute is not counted (MFU, not HFU). LoRA training is 2x the
forward (forward and the gradients of the activations; the frozen weights get none, the
adapters' FLOPs are under 1%). Padding is not counted, so padding lowers the MFU.
MFU = FLOPs / seconds / peak: ``*_mfu`` against ``--peak-tflops`` (989, H100/H200 dense
bf16, on CUDA), ``*_mfu_vs_matmul`` against the matmul peak measured here.

``--budget-s`` bounds the run: a stage whose estimate no longer fits is skipped, and a
watchdog writes the JSON and exits with code 3 when a stage overruns the budget by more than
``--grace-s``. Exit code 1 when a stage failed.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import importlib.metadata
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import transformers  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM  # noqa: E402

from activelearn.prm.backbones import backbone_config, load_tokenizer  # noqa: E402
from activelearn.prm.batching import EpochBatchSampler, TrainingCollator, encode_examples, pad_batch  # noqa: E402
from activelearn.prm.data import LabeledSolution, build_examples  # noqa: E402
from activelearn.prm.distributed import EVENTS_FILE, train  # noqa: E402
from activelearn.prm.memory import GIB, cpu_peak_bytes, estimate_memory  # noqa: E402
from activelearn.prm.modeling import ProcessRewardModel  # noqa: E402
from activelearn.prm.scoring import score_solutions  # noqa: E402
from activelearn.prm.tokenization import DEFAULT_SEPARATOR, StepEncoder, add_step_separator  # noqa: E402
from activelearn.prm.training import TrainConfig, TrainResult, train_prm  # noqa: E402
from benchmarks.prm_throughput import matmul_params, synthesise  # noqa: E402

SPEC_PEAK_TFLOPS_H200 = 989.0  # dense bf16, H100/H200 SXM
BF16_TOLERANCE = 0.02  # max |bf16 - fp32| of a step score or a solution score (probabilities)
LEARNING_RATE = 1e-5
MEGA_BATCH_BATCHES = 50
SEED = 0
LORA_LEARNING_RATE = 1e-4
LORA_RANK = 16


@dataclass(frozen=True)
class Qwen2Shape:
    name: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    max_positions: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def config(self, *, pad_id: int, eos_id: int) -> Qwen2Config:
        return Qwen2Config(
            vocab_size=self.vocab,
            hidden_size=self.hidden,
            intermediate_size=self.intermediate,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads,
            max_position_embeddings=self.max_positions,
            tie_word_embeddings=True,
            pad_token_id=pad_id,
            bos_token_id=None,
            eos_token_id=eos_id,
        )

    def matmul_params(self) -> int:
        """N of the FLOP model for the PRM: backbone without its input embedding, plus the head."""
        kv_width = self.kv_heads * self.head_dim
        attention = 2 * self.hidden * self.hidden + self.hidden + 2 * (self.hidden * kv_width + kv_width)
        mlp = 3 * self.hidden * self.intermediate
        norms = 2 * self.hidden
        head = 3 * self.hidden + 3
        return self.layers * (attention + mlp + norms) + self.hidden + head


# Qwen2.5-0.5B, Qwen2.5-Math-1.5B and Qwen2.5-7B as published; the tiny shapes are for the CPU.
SHAPES = {
    shape.name: shape
    for shape in (
        Qwen2Shape("0.5b", hidden=896, intermediate=4864, layers=24, heads=14, kv_heads=2, vocab=151936, max_positions=32768),  # noqa: E501
        Qwen2Shape("1.5b", hidden=1536, intermediate=8960, layers=28, heads=12, kv_heads=2, vocab=151936, max_positions=4096),  # noqa: E501
        # Qwen2.5-7B (the backbone of Qwen2.5-Math-PRM-7B), at the PRM's 4096 positions.
        Qwen2Shape("7b", hidden=3584, intermediate=18944, layers=28, heads=28, kv_heads=4, vocab=152064, max_positions=4096),  # noqa: E501
        Qwen2Shape("tiny", hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, vocab=4096, max_positions=512),
        Qwen2Shape("small", hidden=128, intermediate=256, layers=4, heads=4, kv_heads=2, vocab=4096, max_positions=512),
    )
}  # fmt: skip


def model_flops(params: int, shape: Qwen2Shape, lengths: Sequence[int], *, training: bool, lora: bool = False) -> float:
    attention_width = shape.heads * shape.head_dim
    forward = 2.0 * params * sum(lengths) + 4.0 * shape.layers * attention_width * sum(s * s for s in lengths)
    if not training:
        return forward
    # LoRA: no weight gradients for the frozen weights, only the activations' (see FLOP_MODEL).
    return (2.0 if lora else 3.0) * forward


FLOP_MODEL = {
    "params": "N = parameters that do matmuls: the backbone without its input embedding "
    "(a lookup; the PRM has no LM head), plus the head",
    "scoring": "sum over windows of 2*N*s + 4*L*A*s^2 (s real tokens, L layers, A = heads*head_dim)",
    "training": "3 x the forward: sum over sequences of 6*N*s + 12*L*A*s^2",
    "lora_training": "2 x the forward (activation gradients only; the adapters' FLOPs, under 1%, not counted)",
    "notes": "attention counted in full (not halved for the causal mask), padding not counted, "
    "gradient-checkpointing recompute not counted (MFU, not HFU)",
    "mfu": "FLOPs / seconds / peak FLOP/s: *_mfu against --peak-tflops, *_mfu_vs_matmul against "
    "the matmul peak measured in the compute dtype",
}

# PRM800K scale, for the per-generation estimate. The release: 101,599 labeled solutions,
# trained for 2 epochs as in the paper; the last generation trains on all of them. The pool
# scored per generation and the mean lengths (Qwen tokens) are assumptions, not measured.
PRM800K_TRAIN_SEQUENCES = 101_599
PRM800K_EPOCHS = 2
PRM800K_TRAIN_MEAN_TOKENS = 450  # problem + steps up to the first error
PRM800K_POOL_SOLUTIONS = 12_000 * 16  # 12K problems x 16 samples
PRM800K_POOL_MEAN_TOKENS = 600  # whole solutions
GOAL_TRAINING_MFU = 0.35
GOAL_SCORING_MFU = 0.40
GOAL_LORA_7B_MFU = 0.30


@dataclass(frozen=True)
class Workload:
    sizes: tuple[str, ...]
    lora_sizes: tuple[str, ...]  # LoRA training stages
    fsdp_sizes: tuple[str, ...]  # FSDP stages, where several processes are asked for
    steps: int  # per synthetic solution
    score_solutions: int
    score_batch_sizes: tuple[int, ...]
    repeats: int
    train_solutions: int
    train_batch_size: int
    accumulation: int
    stepgen_k: int
    stepgen_tokens: int
    line_end_share: int  # one vocabulary entry in this many ends a line (step length)
    bf16_solutions: int
    matmul_n: int


WORKLOADS = {
    # ~450 real tokens per solution (10 steps), like a PRM800K one; the training batch is
    # the docs' recipe for Qwen2.5-Math-1.5B (8 x 4 accumulation), the scoring batch 16 is the
    # pipeline's default and 64 shows what a larger one gains.
    "cuda": Workload(
        sizes=("1.5b", "0.5b"),
        lora_sizes=("7b",),
        fsdp_sizes=("1.5b",),
        steps=10,
        score_solutions=512,
        score_batch_sizes=(16, 64),
        repeats=3,
        train_solutions=384,
        train_batch_size=8,
        accumulation=4,
        stepgen_k=4,
        stepgen_tokens=96,
        line_end_share=32,
        bf16_solutions=64,
        matmul_n=8192,
    ),
    "cpu": Workload(
        sizes=("tiny",),
        lora_sizes=("tiny",),
        fsdp_sizes=("tiny",),
        steps=3,
        score_solutions=12,
        score_batch_sizes=(4,),
        repeats=1,
        train_solutions=16,
        train_batch_size=4,
        accumulation=2,
        stepgen_k=4,
        stepgen_tokens=24,
        line_end_share=4,
        bf16_solutions=8,
        matmul_n=256,
    ),
}

# Seconds a stage needs on CUDA at the 1.5B shape (scaled down by parameters for smaller
# shapes): a stage that no longer fits into the budget is skipped, not started.
STAGE_ESTIMATE_S = {"build": 25.0, "scoring": 25.0, "training": 60.0, "step_generator": 15.0, "fsdp": 90.0}
# The 7B LoRA stage on CUDA: building and saving 15 GB of bf16 weights, loading them,
# 12 optimizer steps, saving the merged model.
LORA_ESTIMATE_S = {"7b": 150.0}


# -- the report: one JSON file, rewritten after every stage -------------------------------


class Report:
    def __init__(self, path: Path, budget_s: float, grace_s: float) -> None:
        self.path = path
        self.started = time.monotonic()
        self.budget_s = budget_s
        self.data: dict[str, Any] = {"stages": [], "finished": False}
        self.lock = threading.Lock()
        self.current: str | None = None
        self.failed = False
        self.scratch: Path | None = None  # removed if the watchdog has to stop the run
        self.watchdog = threading.Timer(budget_s + grace_s, self._abort)
        self.watchdog.daemon = True
        self.watchdog.start()

    def remaining(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def put(self, path: Sequence[str], value: Any) -> None:
        with self.lock:
            node = self.data
            for key in path[:-1]:
                node = node.setdefault(key, {})
            node[path[-1]] = value
            self._write()

    def get(self, path: Sequence[str]) -> Any:
        node: Any = self.data
        for key in path:
            if not isinstance(node, dict) or key not in node:
                return None
            node = node[key]
        return node

    def stage(self, path: Sequence[str], needs_s: float, run: Callable[[], Any]) -> Any:
        """Run one stage, store what it returns at ``path``; never raises."""
        name = "/".join(path)
        left = self.remaining()
        if left < needs_s:
            self._log(name, "skipped", 0.0, 0.0, f"budget: {left:.0f} s left, the stage needs about {needs_s:.0f} s")
            return None
        self.current = name
        print(f"[{time.monotonic() - self.started:6.1f} s] {name} ...", flush=True)
        begun = time.monotonic()
        cpu_begun = time.process_time()
        result: Any = None
        error: str | None = None
        try:
            result = run()
        except Exception as exc:  # an OOM or a CUDA error must not lose the stages before it
            error = f"{type(exc).__name__}: {exc}"[:2000]
            self.put([*path, "error"], {"error": error, "traceback": traceback.format_exc()[-4000:]})
            self.failed = True
        finally:
            _release_memory()
            self.current = None
        seconds = time.monotonic() - begun
        cpu_seconds = time.process_time() - cpu_begun
        if error is None:
            self.put(path, result)
            self._log(name, "ok", seconds, cpu_seconds, None)
        else:
            print(f"    {error}", flush=True)
            self._log(name, "error", seconds, cpu_seconds, error)
        return result

    def finish(self) -> None:
        self.watchdog.cancel()
        with self.lock:
            self.data["finished"] = True
            self.data["elapsed_s"] = round(time.monotonic() - self.started, 1)
            self._write()

    def _log(self, name: str, status: str, seconds: float, cpu_seconds: float, note: str | None) -> None:
        with self.lock:
            # CPU time beside wall time: on a shared host the gap shows how much was waiting.
            entry: dict[str, Any] = {
                "stage": name,
                "status": status,
                "seconds": round(seconds, 2),
                "cpu_seconds": round(cpu_seconds, 2),
            }
            if note:
                entry["note"] = note
            self.data["stages"].append(entry)
            self._write()

    def _write(self) -> None:
        self.data["elapsed_s"] = round(time.monotonic() - self.started, 1)
        scratch = self.path.with_name(f".tmp-{self.path.name}")
        scratch.write_text(json.dumps(self.data, indent=2, default=str))
        os.replace(scratch, self.path)

    def _abort(self) -> None:
        # A stage ran past budget + grace (a hang, or a far slower machine than planned):
        # keep everything measured so far and stop the process, whatever it is doing.
        with self.lock:
            self.data["aborted"] = {"stage": self.current, "after_s": round(time.monotonic() - self.started, 1)}
            self._write()
        print(f"budget exhausted during {self.current}; partial results in {self.path}", flush=True)
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
        os._exit(3)


def _release_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# -- what runs ---------------------------------------------------------------------------


@dataclass
class Context:
    device: torch.device
    workload: Workload
    attention: str
    spec_peak_tflops: float | None
    scratch: Path
    report: Report

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def compute_dtype(self) -> torch.dtype:
        # What the product computes in: bf16 on CUDA (weights for scoring, autocast for
        # training), float32 on the CPU.
        return torch.bfloat16 if self.cuda else torch.float32

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def reset_peak_memory(self) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)

    def peak_memory_gib(self) -> float | None:
        return round(torch.cuda.max_memory_allocated(self.device) / GIB, 2) if self.cuda else None

    def matmul_peak_tflops(self) -> float | None:
        value = self.report.get(["environment", "matmul_peak_tflops"])
        return float(value) if value else None


def resolve_attention(requested: str, device: torch.device) -> tuple[str, str | None]:
    """The attention implementation to use and, when it differs from the request, why."""
    if requested != "flash_attention_2":
        return requested, None
    if device.type != "cuda":
        return "sdpa", "flash_attention_2 needs CUDA; using sdpa"
    try:
        importlib.import_module("flash_attn")
    except Exception as exc:  # missing, or built for another torch: either way not usable
        return "sdpa", f"flash_attention_2 needs the flash-attn package ({type(exc).__name__}: {exc}); using sdpa"
    return requested, None


def environment(ctx: Context, requested_attention: str, attention_note: str | None) -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "accelerate": _version("accelerate"),
        "tokenizers": _version("tokenizers"),
        "flash_attn": _version("flash-attn"),
        "device": str(ctx.device),
        "torch_threads": torch.get_num_threads(),
        "attention_requested": requested_attention,
        "attention": ctx.attention,
        "attention_note": attention_note,
        "spec_peak_tflops": ctx.spec_peak_tflops,
        "flops": FLOP_MODEL,
        "bf16_tolerance": BF16_TOLERANCE,
        "workload": asdict(ctx.workload),
    }
    if ctx.cuda:
        properties = torch.cuda.get_device_properties(ctx.device)
        info["gpu"] = properties.name
        info["gpu_memory_gib"] = round(properties.total_memory / GIB, 1)
        info["capability"] = ".".join(map(str, torch.cuda.get_device_capability(ctx.device)))
        info["cuda"] = torch.version.cuda
        info["sdp_backends_enabled"] = {
            name: bool(getattr(torch.backends.cuda, f"{name}_sdp_enabled", lambda: False)())
            for name in ("flash", "mem_efficient", "cudnn", "math")
        }
    info["compute_dtype"] = str(ctx.compute_dtype).removeprefix("torch.")
    info["matmul_peak_tflops"] = _significant(measure_matmul_tflops(ctx))
    return info


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def measure_matmul_tflops(ctx: Context) -> float:
    """Best square-matmul rate of a few rounds in the compute dtype: the achievable peak here."""
    n = ctx.workload.matmul_n
    a = torch.randn(n, n, device=ctx.device, dtype=ctx.compute_dtype)
    b = torch.randn(n, n, device=ctx.device, dtype=ctx.compute_dtype)
    iterations = 20 if ctx.cuda else 3
    for _ in range(3):
        a @ b
    best = math.inf
    for _ in range(3):
        ctx.sync()
        begun = time.perf_counter()
        for _ in range(iterations):
            a @ b
        ctx.sync()
        best = min(best, time.perf_counter() - begun)
    return 2.0 * n**3 * iterations / best / 1e12


# -- model directories --------------------------------------------------------------------

SPECIALS = ["<pad>", "<eos>"]
PAD_ID, EOS_ID = 0, 1
BYTE_LEVEL_NEWLINE = "\u010a"  # how a byte-level BPE vocabulary writes "\n"


def build_tokenizer(size: int, line_end_share: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE like Qwen's, trained on synthetic solutions and padded to ``size`` entries.

    Saved beside a Qwen2 config it loads as ``Qwen2Tokenizer`` (transformers picks the class
    from the model type and keeps only the vocabulary and merges), so it must be byte-level.
    One entry in ``line_end_share`` of the vocabulary is a padding word ending in a line
    break: a random model then writes steps of about that many tokens, and the step
    generator has whole steps to return and compare.
    """
    corpus = [
        "\n".join([solution.problem, *(step.completions[0].text for step in solution.steps)])
        for solution in synthesise(200, 8, seed=9)
    ]
    trained = Tokenizer(models.BPE())
    trained.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trained.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=min(size, 4000),
            special_tokens=SPECIALS,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    model = json.loads(trained.to_str())["model"]
    vocab: dict[str, int] = dict(model["vocab"])
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    fillers = size - len(vocab)
    every = max(1, fillers * line_end_share // size)
    for i in range(fillers):
        vocab[f"w{i}{BYTE_LEVEL_NEWLINE if i % every == 0 else ''}"] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tokenizer, pad_token="<pad>", eos_token="<eos>"
    )


def build_model_directory(ctx: Context, shape: Qwen2Shape, directory: Path) -> dict[str, Any]:
    """A randomly initialised Qwen2 causal LM saved like a real checkpoint (bf16, tied embeddings).

    Its tokenizer stays below the vocabulary (as Qwen's does), so the PRM's step separator
    takes a free row and the embedding is not resized.
    """
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(shape.vocab - 64, ctx.workload.line_end_share)
    tokenizer.save_pretrained(str(directory))
    torch.manual_seed(SEED)
    # Initialised on the device: a 1.5B random init on the CPU takes longer than the check.
    with torch.device(ctx.device):
        model = Qwen2ForCausalLM(shape.config(pad_id=PAD_ID, eos_id=EOS_ID))
    model.to(torch.bfloat16)
    model.save_pretrained(str(directory))
    del model
    # The attention choice travels in config.json: AutoModel honours it when it loads the
    # model, so train_prm, score_solutions and the raw loops all run the same kernels.
    config_path = directory / "config.json"
    config = json.loads(config_path.read_text())
    config["attn_implementation"] = ctx.attention
    config_path.write_text(json.dumps(config, indent=2))
    return {
        "shape": asdict(shape),
        "matmul_params": shape.matmul_params(),
        "bytes_on_disk": sum(p.stat().st_size for p in directory.iterdir() if p.is_file()),
    }


def _attention_of(model: ProcessRewardModel) -> str:
    return str(getattr(model.backbone.config, "_attn_implementation", "unknown"))


def _pairs(solutions: Sequence[LabeledSolution]) -> list[tuple[str, tuple[str, ...]]]:
    return [(s.problem, tuple(step.completions[0].text for step in s.steps)) for s in solutions]


def _rates(ctx: Context, flops: float, tokens: int, raw_seconds: float, pipeline_seconds: float) -> dict[str, Any]:
    matmul_peak = ctx.matmul_peak_tflops()
    summary: dict[str, Any] = {
        "tokens": tokens,
        "raw_seconds": round(raw_seconds, 4),
        "pipeline_seconds": round(pipeline_seconds, 4),
        "raw_tokens_per_s": round(tokens / raw_seconds, 1),
        "pipeline_tokens_per_s": round(tokens / pipeline_seconds, 1),
        "ratio": round(raw_seconds / pipeline_seconds, 3),
        "model_tflop": _significant(flops / 1e12),
        "raw_tflop_per_s": _significant(flops / raw_seconds / 1e12),
        "pipeline_tflop_per_s": _significant(flops / pipeline_seconds / 1e12),
    }
    for side, seconds in (("raw", raw_seconds), ("pipeline", pipeline_seconds)):
        rate = flops / seconds / 1e12
        summary[f"{side}_mfu"] = _significant(rate / ctx.spec_peak_tflops) if ctx.spec_peak_tflops else None
        summary[f"{side}_mfu_vs_matmul"] = _significant(rate / matmul_peak) if matmul_peak else None
    return summary


def _significant(value: float, digits: int = 4) -> float:
    # Tiny CPU models and an H200 differ by six orders of magnitude; fixed decimals would
    # round one of them to zero.
    return float(f"{value:.{digits}g}")


# -- scoring ------------------------------------------------------------------------------


def bench_scoring(ctx: Context, shape: Qwen2Shape, directory: Path, batch_size: int) -> dict[str, Any]:
    max_length = min(2048, shape.max_positions)
    # As the scoring worker loads a checkpoint: bfloat16 weights on CUDA, float32 on the CPU.
    model, tokenizer = ProcessRewardModel.from_backbone(directory, max_length=max_length, dtype=ctx.compute_dtype)
    model.to(ctx.device).eval()
    pairs = _pairs(synthesise(ctx.workload.score_solutions, ctx.workload.steps, seed=1))
    encoder = model.step_encoder(tokenizer)
    # The batches score_solutions forms: all windows sorted by length, then cut.
    windows = sorted((w for item in encoder.encode_many(pairs) for w in item), key=lambda w: len(w.input_ids))
    batches = []
    for start in range(0, len(windows), batch_size):
        chunk = windows[start : start + batch_size]
        input_ids, attention_mask = pad_batch([w.input_ids for w in chunk], encoder.pad_id)
        rows = torch.tensor([r for r, w in enumerate(chunk) for _ in w.separator_positions])
        cols = torch.tensor([p for w in chunk for p in w.separator_positions])
        batches.append(tuple(t.to(ctx.device) for t in (input_ids, attention_mask, rows, cols)))
    lengths = [len(w.input_ids) for w in windows]
    padded = sum(int(batch[0].numel()) for batch in batches)

    def raw() -> None:
        with (
            torch.inference_mode(),
            torch.autocast(device_type=ctx.device.type, dtype=torch.bfloat16, enabled=ctx.cuda),
        ):
            for input_ids, attention_mask, rows, cols in batches:
                model(input_ids, attention_mask, positions=(rows, cols))

    def pipeline() -> None:
        score_solutions(model, tokenizer, pairs, batch_size=batch_size)

    raw()  # warm-up: kernels, allocator, tokenizer caches
    pipeline()
    ctx.reset_peak_memory()
    raw_times, pipeline_times = [], []
    for _ in range(ctx.workload.repeats):  # interleaved, so drift hits both sides alike
        raw_times.append(_timed(ctx, raw))
        pipeline_times.append(_timed(ctx, pipeline))
    params = matmul_params(model)
    flops = model_flops(params, shape, lengths, training=False)
    return {
        "batch_size": batch_size,
        "matmul_params": params,
        "solutions": len(pairs),
        "windows": len(windows),
        "mean_length": round(statistics.fmean(lengths), 1),
        "max_length": max(lengths),
        "padding_fraction": round(1 - sum(lengths) / padded, 4),
        "weights_dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "attention": _attention_of(model),
        **_rates(ctx, flops, sum(lengths), statistics.median(raw_times), statistics.median(pipeline_times)),
        "raw_seconds_all": [round(t, 4) for t in raw_times],
        "pipeline_seconds_all": [round(t, 4) for t in pipeline_times],
        "peak_memory_gib": ctx.peak_memory_gib(),
    }


def _timed(ctx: Context, run: Callable[[], None]) -> float:
    ctx.sync()
    begun = time.perf_counter()
    run()
    ctx.sync()
    return time.perf_counter() - begun


# -- training -----------------------------------------------------------------------------


def bench_training(ctx: Context, shape: Qwen2Shape, directory: Path, checkpointing: bool) -> dict[str, Any]:
    work = ctx.workload
    solutions = synthesise(work.train_solutions, work.steps, seed=2)
    # Fine-tuning is what is measured (freeze_layers=0), whatever the backbone family's CPU default.
    config = _training_config(
        ctx, shape, directory, "gc" if checkpointing else "nogc", gradient_checkpointing=checkpointing
    )
    raw = raw_training(ctx, shape, config, solutions)
    _release_memory()  # the raw side's model and optimizer states, before train_prm loads its own

    stamps: list[float] = []
    ctx.reset_peak_memory()
    try:
        result = train_prm(solutions, config, validation=[], progress=lambda *_: stamps.append(time.perf_counter()))
        pipeline_peak = ctx.peak_memory_gib()
        saved = json.loads((result.final_dir / "backbone" / "config.json").read_text())
    finally:
        shutil.rmtree(config.output_dir, ignore_errors=True)
    # The progress callback runs after each step's loss reached the host, so the stamps
    # are synchronised with the device; step 1 is the warm-up, as on the raw side.
    pipeline_seconds = stamps[-1] - stamps[0]
    losses = [loss for _, loss in result.train_loss_curve]
    lengths: list[int] = raw.pop("timed_lengths")
    return {
        "gradient_checkpointing": checkpointing,
        "batch_size": work.train_batch_size,
        "gradient_accumulation_steps": work.accumulation,
        "optimizer_steps": result.optimizer_steps,
        "timed_optimizer_steps": result.optimizer_steps - 1,
        "mean_length": round(statistics.fmean(lengths), 1),
        # The dtype train_prm kept the backbone in: float32 master weights, bf16 compute.
        "master_weights_dtype": saved.get("dtype") or saved.get("torch_dtype"),
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "losses_finite": all(math.isfinite(loss) for loss in losses),
        **_rates(ctx, raw.pop("flops"), sum(lengths), raw.pop("seconds"), pipeline_seconds),
        "peak_memory_gib": {"raw": raw.pop("peak_memory_gib"), "pipeline": pipeline_peak},
        **raw,
    }


def raw_training(
    ctx: Context, shape: Qwen2Shape, config: TrainConfig, solutions: Sequence[LabeledSolution]
) -> dict[str, Any]:
    """``model(...)``, ``loss.backward()`` and AdamW on the micro-batches train_prm will form.

    Same encoder, sampler, seed and collator, so the same batches in the same order; the same
    accumulation, autocast and checkpointing; none of accelerate, the DataLoader, gradient
    clipping, the scheduler or the per-step bookkeeping. Optimizer step 1 is the warm-up.
    """
    accumulation = config.gradient_accumulation_steps
    model, tokenizer = ProcessRewardModel.from_backbone(config.backbone, max_length=config.max_length)
    encoder = model.step_encoder(tokenizer)
    sequences = encode_examples(encoder, build_examples(solutions, config.neutral))
    sampler = EpochBatchSampler([len(s.input_ids) for s in sequences], config.batch_size, MEGA_BATCH_BATCHES, SEED)
    collator = TrainingCollator(pad_id=encoder.pad_id, pad_to_multiple_of=8 if ctx.cuda else 1)
    order = list(sampler)
    if len(order) < 2 * accumulation:
        raise ValueError("need at least two optimizer steps; raise the number of training solutions")
    timed_lengths = [len(sequences[i].input_ids) for batch in order[accumulation:] for i in batch]
    batches = [{k: v.to(ctx.device) for k, v in collator([sequences[i] for i in batch]).items()} for batch in order]
    padded = sum(int(batch["input_ids"].numel()) for batch in batches[accumulation:])

    model.to(ctx.device).train()
    if config.gradient_checkpointing:
        model.enable_gradient_checkpointing()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate)

    def run(micro_batches: Sequence[dict[str, torch.Tensor]]) -> None:
        for start in range(0, len(micro_batches), accumulation):
            group = micro_batches[start : start + accumulation]
            for batch in group:
                with torch.autocast(device_type=ctx.device.type, dtype=torch.bfloat16, enabled=ctx.cuda):
                    loss = model(**batch).loss
                assert loss is not None
                (loss / len(group)).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    ctx.reset_peak_memory()
    run(batches[:accumulation])
    seconds = _timed(ctx, lambda: run(batches[accumulation:]))
    return {
        "seconds": seconds,
        "peak_memory_gib": ctx.peak_memory_gib(),
        "flops": model_flops(matmul_params(model), shape, timed_lengths, training=True),
        "timed_lengths": timed_lengths,
        "sequences": len(sequences),
        "padding_fraction": round(1 - sum(timed_lengths) / padded, 4),
        # train_prm loads the backbone the same way, so it runs the same kernels.
        "attention": _attention_of(model),
    }


# -- LoRA and FSDP -----------------------------------------------------------------------


def _step_lengths(directory: Path, config: TrainConfig, solutions: Sequence[LabeledSolution]) -> list[list[int]]:
    """Sequence lengths of train_prm's micro-batches, in its order, from the tokenizer alone
    (the same encoder, sampler and seed; no model load)."""
    assert config.max_length is not None
    tokenizer = load_tokenizer(directory)
    add_step_separator(tokenizer, DEFAULT_SEPARATOR)
    encoder = StepEncoder(
        tokenizer, separator=DEFAULT_SEPARATOR, max_length=config.max_length, max_problem_tokens=config.max_length // 2
    )
    sequences = encode_examples(encoder, build_examples(solutions, config.neutral))
    sampler = EpochBatchSampler([len(s.input_ids) for s in sequences], config.batch_size, MEGA_BATCH_BATCHES, SEED)
    return [[len(sequences[i].input_ids) for i in batch] for batch in sampler]


def _training_config(ctx: Context, shape: Qwen2Shape, directory: Path, name: str, **overrides: Any) -> TrainConfig:
    work = ctx.workload
    values: dict[str, Any] = dict(
        output_dir=ctx.scratch / f"train-{shape.name}-{name}",
        backbone=str(directory),
        learning_rate=LEARNING_RATE,
        num_epochs=1,
        batch_size=work.train_batch_size,
        gradient_accumulation_steps=work.accumulation,
        max_length=min(2048, shape.max_positions),
        warmup_ratio=0.0,
        checkpoint_every=0,
        mega_batch_batches=MEGA_BATCH_BATCHES,
        bf16=ctx.cuda,
        gradient_checkpointing=True,
        freeze_layers=0,
        seed=SEED,
        cpu=not ctx.cuda,
    )
    values.update(overrides)
    return TrainConfig(**values)


def _throughput(
    ctx: Context, shape: Qwen2Shape, timed_lengths: list[int], seconds: float, *, lora: bool, devices: int
) -> dict[str, Any]:
    flops = model_flops(shape.matmul_params(), shape, timed_lengths, training=True, lora=lora)
    rate = flops / seconds / 1e12 / devices
    matmul_peak = ctx.matmul_peak_tflops()
    return {
        "tokens": sum(timed_lengths),
        "seconds": round(seconds, 3),
        "tokens_per_s": round(sum(timed_lengths) / seconds, 1),
        "model_tflop": _significant(flops / 1e12),
        "tflop_per_s_per_device": _significant(rate),
        "mfu": _significant(rate / ctx.spec_peak_tflops) if ctx.spec_peak_tflops else None,
        "mfu_vs_matmul": _significant(rate / matmul_peak) if matmul_peak else None,
    }


def bench_lora(ctx: Context, shape: Qwen2Shape, directory: Path) -> dict[str, Any]:
    """train_prm with LoRA on a backbone held in bf16 (CUDA), gradient checkpointing on."""
    work = ctx.workload
    solutions = synthesise(work.train_solutions, work.steps, seed=2)
    config = _training_config(
        ctx, shape, directory, "lora", adapter="lora", lora_rank=LORA_RANK, learning_rate=LORA_LEARNING_RATE
    )
    stamps: list[float] = []
    results: list[TrainResult] = []

    def run() -> None:
        progress = lambda *_: stamps.append(time.perf_counter())  # noqa: E731
        results.append(train_prm(solutions, config, validation=[], progress=progress))

    ctx.reset_peak_memory()
    try:
        # On the CPU the allocator's own count (activelearn.prm.memory.cpu_peak_bytes).
        cpu_peak = None if ctx.cuda else cpu_peak_bytes(run)
        if ctx.cuda:
            run()
    finally:
        shutil.rmtree(config.output_dir, ignore_errors=True)
    result = results[0]
    accumulation = config.gradient_accumulation_steps
    batches = _step_lengths(directory, config, solutions)
    timed = [n for batch in batches[accumulation:] for n in batch]
    estimate = (result.memory or {}).get("lora") or {}
    peak = ctx.peak_memory_gib() if ctx.cuda else round((cpu_peak or 0) / GIB, 4)
    # The estimate at the widest batch this run had: the synthetic solutions stop well short
    # of the recipe's length, which the estimate that chose the adapter assumes.
    widest = estimate_memory(
        backbone_config(directory),
        adapter="lora",
        batch_size=config.batch_size,
        max_length=max(n for batch in batches for n in batch),
        gradient_accumulation_steps=accumulation,
        gradient_checkpointing=True,
        bf16=ctx.cuda,
        cuda=ctx.cuda,
        lora_rank=LORA_RANK,
    ).peak
    losses = [loss for _, loss in result.train_loss_curve]
    return {
        "adapter": result.hyperparameters["adapter"],
        "lora_rank": LORA_RANK,
        "trainable_parameters": estimate.get("trainable_parameters"),
        "parameters": estimate.get("parameters"),
        "batch_size": config.batch_size,
        "gradient_accumulation_steps": accumulation,
        "gradient_checkpointing": True,
        "optimizer_steps": result.optimizer_steps,
        "timed_optimizer_steps": result.optimizer_steps - 1,
        "losses_finite": all(math.isfinite(loss) for loss in losses),
        **_throughput(ctx, shape, timed, stamps[-1] - stamps[0], lora=True, devices=1),
        "peak_memory_gib": peak,
        "estimated_peak_gib_at_max_length": round(estimate["peak"] / GIB, 4) if estimate else None,
        "estimated_peak_gib_at_widest_batch": round(widest / GIB, 4),
        "estimate_over_measured": round(widest / GIB / peak, 3) if peak else None,
    }


def bench_fsdp(ctx: Context, shape: Qwen2Shape, directory: Path, processes: int) -> dict[str, Any]:
    """A full fine-tune sharded over ``processes`` processes, launched as the pipeline does."""
    work = ctx.workload
    solutions = synthesise(work.train_solutions, work.steps, seed=2)
    # One micro-batch a step: at 8 processes the workload is 6 optimizer steps.
    config = _training_config(
        ctx, shape, directory, "fsdp", adapter="full", processes=processes, gradient_accumulation_steps=1
    )
    stamps: list[float] = []
    used: list[int] = []
    done = threading.Event()

    def sample_device_memory() -> None:
        # NVML's view of each GPU (every process, the CUDA context included).
        while not done.wait(0.2):
            used.append(max(torch.cuda.device_memory_used(i) for i in range(processes)))

    sampler = threading.Thread(target=sample_device_memory, daemon=True)
    if ctx.cuda:
        sampler.start()
    try:
        result = train(solutions, config, validation=[])
        # When the main process finished each step (its wall time, in the run's event file).
        for line in (Path(config.output_dir) / EVENTS_FILE).read_text().splitlines():
            event = json.loads(line)
            if "at" in event:
                stamps.append(float(event["at"]))
    finally:
        done.set()
        shutil.rmtree(config.output_dir, ignore_errors=True)
    # Each optimizer step takes `processes` x accumulation micro-batches, the first is the warm-up.
    first = processes * config.gradient_accumulation_steps
    timed = [n for batch in _step_lengths(directory, config, solutions)[first:] for n in batch]
    estimate = (result.memory or {}).get("full") or {}
    return {
        "processes": processes,
        "sharded": estimate.get("sharded"),
        "optimizer_steps": result.optimizer_steps,
        "timed_optimizer_steps": result.optimizer_steps - 1,
        "losses_finite": all(math.isfinite(loss) for _, loss in result.train_loss_curve),
        **_throughput(ctx, shape, timed, stamps[-1] - stamps[0], lora=False, devices=processes),
        "peak_device_memory_gib": round(max(used) / GIB, 2) if used else None,
        "estimated_peak_gib_per_process": round(estimate["peak"] / GIB, 2) if estimate else None,
    }


def run_lora(ctx: Context, shape: Qwen2Shape) -> None:
    directory = ctx.scratch / f"backbone-lora-{shape.name}"
    needs = LORA_ESTIMATE_S.get(shape.name, 0.0) if ctx.cuda else 0.0
    try:
        # One stage: the build is most of its cost, and without the training it measures nothing.
        def build_and_train() -> dict[str, Any]:
            built = build_model_directory(ctx, shape, directory)
            return {"model": built, **bench_lora(ctx, shape, directory)}

        ctx.report.stage(["lora", shape.name], needs, build_and_train)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


# -- step generator -----------------------------------------------------------------------


def bench_step_generator(ctx: Context, directory: Path) -> dict[str, Any]:
    from activelearn.stepgen.base import SamplingParams
    from activelearn.stepgen.local_lm import LocalLMGenerator

    work = ctx.workload
    generator = LocalLMGenerator.from_directory(
        directory, device=str(ctx.device), params=SamplingParams(k=work.stepgen_k, max_tokens=work.stepgen_tokens)
    )
    problem, steps = _pairs(synthesise(1, 3, seed=3))[0]
    generator.generate(problem=problem, steps=steps, seed=1)  # warm-up
    ctx.sync()
    begun = time.perf_counter()
    first = generator.generate(problem=problem, steps=steps, seed=7)
    seconds = time.perf_counter() - begun
    again = generator.generate(problem=problem, steps=steps, seed=7)
    other = generator.generate(problem=problem, steps=steps, seed=8)
    return {
        "k": work.stepgen_k,
        "max_tokens": work.stepgen_tokens,
        "dtype": first.sampling.extra.get("dtype"),
        "device": first.sampling.extra.get("device"),
        "seconds_per_request": round(seconds, 4),
        "candidates": len(first.texts),
        "incomplete": first.incomplete,
        "empty": first.empty,
        "duplicates": first.duplicates,
        "same_seed_same_candidates": first.texts == again.texts,
        "other_seed_other_candidates": first.texts != other.texts,
    }


# -- bf16 against fp32 --------------------------------------------------------------------


def bench_bf16_agreement(ctx: Context) -> dict[str, Any]:
    shape = SHAPES["small"]
    backbone = build_model_directory(ctx, shape, ctx.scratch / "bf16-backbone")
    del backbone
    torch.manual_seed(SEED)
    model, tokenizer = ProcessRewardModel.from_backbone(ctx.scratch / "bf16-backbone", max_length=shape.max_positions)
    # A fresh head puts every logit near 0 and every probability near 1/3, which would hide
    # disagreements; a wider head spreads the scores over (0, 1) like a trained one.
    with torch.no_grad():
        model.head.weight.normal_(0.0, 2.0 / math.sqrt(shape.hidden))
    saved = model.save_pretrained(ctx.scratch / "bf16-prm", tokenizer)
    pairs = _pairs(synthesise(ctx.workload.bf16_solutions, ctx.workload.steps, seed=4))

    reference_model, _ = ProcessRewardModel.from_pretrained(saved)
    reference = score_solutions(reference_model.to("cpu"), tokenizer, pairs, batch_size=8)
    variants: dict[str, ProcessRewardModel] = {
        # How the GPU worker loads a checkpoint for scoring.
        "bf16_weights": ProcessRewardModel.from_pretrained(saved, dtype=torch.bfloat16)[0],
    }
    if ctx.cuda:
        # A checkpoint loaded without a dtype: float32 weights, score_solutions' bf16 autocast.
        variants["fp32_weights_bf16_autocast"] = ProcessRewardModel.from_pretrained(saved)[0]
    result: dict[str, Any] = {
        "tolerance": BF16_TOLERANCE,
        "reference": "float32 weights on the CPU, no autocast",
        "solutions": len(pairs),
        "steps": sum(len(steps) for _, steps in pairs),
        "reference_step_score_range": [
            round(min(min(s.step_scores) for s in reference), 4),
            round(max(max(s.step_scores) for s in reference), 4),
        ],
    }
    for name, variant in variants.items():
        scores = score_solutions(variant.to(ctx.device), tokenizer, pairs, batch_size=8)
        step_diffs = [
            abs(a - b)
            for want, got in zip(reference, scores, strict=True)
            for a, b in zip(want.step_scores, got.step_scores, strict=True)
        ]
        solution_diffs = [abs(want.score - got.score) for want, got in zip(reference, scores, strict=True)]
        class_agreement = statistics.fmean(
            max(range(3), key=lambda c: a[c]) == max(range(3), key=lambda c: b[c])
            for want, got in zip(reference, scores, strict=True)
            for a, b in zip(want.step_probabilities, got.step_probabilities, strict=True)
        )
        result[name] = {
            "max_step_score_diff": round(max(step_diffs), 6),
            "mean_step_score_diff": round(statistics.fmean(step_diffs), 6),
            "max_solution_score_diff": round(max(solution_diffs), 6),
            "argmax_class_agreement": round(class_agreement, 4),
            "passed": max(step_diffs) <= BF16_TOLERANCE and max(solution_diffs) <= BF16_TOLERANCE,
        }
    result["passed"] = all(result[name]["passed"] for name in variants)
    return result


# -- summary ------------------------------------------------------------------------------


def goals(report: Report) -> dict[str, Any]:
    """Best pipeline MFU at 1.5B for training and scoring, against the goals."""
    size = report.get(["models", "1.5b"]) or {}
    training = [v.get("pipeline_mfu") for v in (size.get("training") or {}).values() if isinstance(v, dict)]
    scoring = [v.get("pipeline_mfu") for v in (size.get("scoring") or {}).values() if isinstance(v, dict)]
    summary: dict[str, Any] = {}
    for name, values, goal in (("training", training, GOAL_TRAINING_MFU), ("scoring", scoring, GOAL_SCORING_MFU)):
        measured = max((v for v in values if v is not None), default=None)
        summary[f"{name}_mfu_1.5b"] = {
            "goal": goal,
            "measured": measured,
            "met": None if measured is None else measured >= goal,
        }
    lora = report.get(["lora", "7b"]) or {}
    measured = lora.get("mfu")
    summary["lora_training_mfu_7b"] = {
        "goal": GOAL_LORA_7B_MFU,
        "measured": measured,
        "met": None if measured is None else measured >= GOAL_LORA_7B_MFU,
    }
    return summary


def prm800k_estimate(report: Report) -> dict[str, Any]:
    """Seconds per generation at PRM800K scale for Qwen2.5-Math-1.5B on one GPU.

    Training: all labeled solutions for 2 epochs (the last, largest generation); scoring: the
    pool. From the FLOP model on an H200 at the MFU goals, and at this run's measured 1.5B
    rates when there are any.
    """
    shape = SHAPES["1.5b"]
    params = shape.matmul_params()
    train_tokens = PRM800K_TRAIN_SEQUENCES * PRM800K_EPOCHS * PRM800K_TRAIN_MEAN_TOKENS
    pool_tokens = PRM800K_POOL_SOLUTIONS * PRM800K_POOL_MEAN_TOKENS
    train_flops = model_flops(params, shape, [PRM800K_TRAIN_MEAN_TOKENS], training=True) * (
        PRM800K_TRAIN_SEQUENCES * PRM800K_EPOCHS
    )
    score_flops = model_flops(params, shape, [PRM800K_POOL_MEAN_TOKENS], training=False) * PRM800K_POOL_SOLUTIONS
    estimate: dict[str, Any] = {
        "assumptions": {
            "backbone": "Qwen2.5-Math-1.5B shape",
            "train_sequences": PRM800K_TRAIN_SEQUENCES,
            "epochs": PRM800K_EPOCHS,
            "train_mean_tokens": PRM800K_TRAIN_MEAN_TOKENS,
            "pool_solutions": PRM800K_POOL_SOLUTIONS,
            "pool_mean_tokens": PRM800K_POOL_MEAN_TOKENS,
            "note": "token lengths and pool size are assumptions; grading and selection (CPU) are not included",
        },
        "train_tokens": train_tokens,
        "pool_tokens": pool_tokens,
        "train_pflop": round(train_flops / 1e15, 1),
        "score_pflop": round(score_flops / 1e15, 1),
    }
    train_s = train_flops / (GOAL_TRAINING_MFU * SPEC_PEAK_TFLOPS_H200 * 1e12)
    score_s = score_flops / (GOAL_SCORING_MFU * SPEC_PEAK_TFLOPS_H200 * 1e12)
    estimate["h200_at_goal_mfu"] = {
        "peak_tflops": SPEC_PEAK_TFLOPS_H200,
        "training_mfu": GOAL_TRAINING_MFU,
        "scoring_mfu": GOAL_SCORING_MFU,
        "training_s": round(train_s),
        "scoring_s": round(score_s),
        "total_s": round(train_s + score_s),
    }
    size = report.get(["models", "1.5b"]) or {}
    train_rates = [
        v["pipeline_tokens_per_s"] for v in (size.get("training") or {}).values() if "pipeline_tokens_per_s" in v
    ]
    score_rates = [
        v["pipeline_tokens_per_s"] for v in (size.get("scoring") or {}).values() if "pipeline_tokens_per_s" in v
    ]
    if train_rates and score_rates:
        train_s = train_tokens / max(train_rates)
        score_s = pool_tokens / max(score_rates)
        estimate["at_measured_rates"] = {
            "training_tokens_per_s": max(train_rates),
            "scoring_tokens_per_s": max(score_rates),
            "training_s": round(train_s),
            "scoring_s": round(score_s),
            "total_s": round(train_s + score_s),
        }
    return estimate


# -- main ---------------------------------------------------------------------------------


def run_size(ctx: Context, shape: Qwen2Shape, fsdp_processes: int = 0) -> None:
    report = ctx.report
    # Stage estimates are for 1.5B on CUDA; smaller shapes need proportionally less.
    scale = max(0.1, shape.matmul_params() / SHAPES["1.5b"].matmul_params()) if ctx.cuda else 0.0
    directory = ctx.scratch / f"backbone-{shape.name}"
    base = ["models", shape.name]
    try:
        built = report.stage(
            [*base, "model"],
            STAGE_ESTIMATE_S["build"] * scale,
            lambda: build_model_directory(ctx, shape, directory),
        )
        if built is None:
            return
        for batch_size in ctx.workload.score_batch_sizes:
            report.stage(
                [*base, "scoring", f"batch_{batch_size}"],
                STAGE_ESTIMATE_S["scoring"] * scale,
                functools.partial(bench_scoring, ctx, shape, directory, batch_size),
            )
        for checkpointing in (True, False):
            report.stage(
                [*base, "training", "checkpointing" if checkpointing else "no_checkpointing"],
                STAGE_ESTIMATE_S["training"] * scale,
                functools.partial(bench_training, ctx, shape, directory, checkpointing),
            )
        report.stage(
            [*base, "step_generator"],
            STAGE_ESTIMATE_S["step_generator"] * scale,
            lambda: bench_step_generator(ctx, directory),
        )
        if fsdp_processes > 1 and shape.name in ctx.workload.fsdp_sizes:
            report.stage(
                ["fsdp", shape.name],
                STAGE_ESTIMATE_S["fsdp"] * scale,
                functools.partial(bench_fsdp, ctx, shape, directory, fsdp_processes),
            )
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def default_scratch(cuda: bool) -> Path:
    # A 1.5B backbone (3 GB in bf16) and train_prm's final float32 save (6 GB) are written
    # and read back several times; tmpfs keeps that off the disk when it has the room.
    shm = Path("/dev/shm")
    # The 7B LoRA stage writes its 15 GB backbone and then the merged 15 GB PRM.
    if cuda and shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 40 * GIB:
        return shm
    return Path(tempfile.gettempdir())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "out" / "gpu-check.json")
    parser.add_argument("--sizes", default=None, help=f"comma-separated, of {', '.join(SHAPES)}")
    parser.add_argument(
        "--attention", default="sdpa", choices=("sdpa", "flash_attention_2", "eager"),
        help="sdpa is what the product gets from transformers; flash_attention_2 needs the flash-attn package",
    )  # fmt: skip
    parser.add_argument("--budget-s", type=float, default=420.0, help="stages that no longer fit are skipped")
    parser.add_argument("--grace-s", type=float, default=30.0, help="past budget + grace the watchdog stops the run")
    parser.add_argument("--peak-tflops", type=float, default=None, help="spec peak; 989 (H100/H200 bf16) on CUDA")
    parser.add_argument("--scratch", type=Path, default=None)
    parser.add_argument("--score-batch-sizes", default=None, help="comma-separated")
    parser.add_argument("--train-batch-size", type=int, default=None)
    parser.add_argument("--skip-bf16-check", action="store_true")
    parser.add_argument(
        "--fsdp-processes", type=int, default=None,
        help="processes of the FSDP stage (default: every visible GPU on CUDA, none on the CPU; 2 runs it on gloo)",
    )  # fmt: skip
    parser.add_argument(
        "--threads", type=int, default=None,
        help="torch CPU threads; default 1 with --device cpu (on a busy host, waiting threads cost more than they add)",
    )  # fmt: skip
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    if args.threads or device.type == "cpu":
        torch.set_num_threads(args.threads or 1)
    workload = WORKLOADS["cuda" if device.type == "cuda" else "cpu"]
    overrides: dict[str, Any] = {}
    if args.sizes:
        overrides["sizes"] = tuple(args.sizes.split(","))
        overrides["lora_sizes"] = tuple(size for size in overrides["sizes"] if size in workload.lora_sizes)
        unknown = set(overrides["sizes"]) - set(SHAPES)
        if unknown:
            parser.error(f"unknown sizes: {', '.join(sorted(unknown))}")
    if args.score_batch_sizes:
        overrides["score_batch_sizes"] = tuple(int(b) for b in args.score_batch_sizes.split(","))
    if args.train_batch_size:
        overrides["train_batch_size"] = args.train_batch_size
    workload = Workload(**{**asdict(workload), **overrides})
    peak = args.peak_tflops
    if peak is None and device.type == "cuda":
        peak = SPEC_PEAK_TFLOPS_H200
    attention, attention_note = resolve_attention(args.attention, device)

    args.output.parent.mkdir(parents=True, exist_ok=True)
    report = Report(args.output, args.budget_s, args.grace_s)
    report.put(["command"], [Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])])
    scratch_root = args.scratch or default_scratch(device.type == "cuda")
    with tempfile.TemporaryDirectory(prefix="gpu-check-", dir=scratch_root) as scratch:
        ctx = Context(device, workload, attention, peak, Path(scratch), report)
        report.scratch = ctx.scratch
        report.stage(["environment"], 0.0, lambda: environment(ctx, args.attention, attention_note))
        if not args.skip_bf16_check:
            report.stage(["bf16_vs_fp32"], 10.0 if ctx.cuda else 0.0, lambda: bench_bf16_agreement(ctx))
        fsdp = args.fsdp_processes
        if fsdp is None:
            fsdp = torch.cuda.device_count() if ctx.cuda else 0
        first, *rest = workload.sizes
        run_size(ctx, SHAPES[first], fsdp)
        for name in workload.lora_sizes:
            run_lora(ctx, SHAPES[name])
        for name in rest:
            run_size(ctx, SHAPES[name], fsdp)
    report.put(["goals"], goals(report))
    report.put(["prm800k_estimate"], prm800k_estimate(report))
    report.finish()
    print(json.dumps({"goals": report.get(["goals"]), "stages": report.get(["stages"])}, indent=2))
    print(f"wrote {args.output}")
    return 1 if report.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
