"""PRM throughput through our pipeline against the bare backbone, in the same run.

Scoring: ``score_solutions`` (tokenization, windowing, length-sorted batching, softmax,
reductions) against ``backbone(input_ids, attention_mask)`` on the very batches
``score_solutions`` builds, pre-tokenised. Training: ``train_prm`` (accelerate, our
DataLoader and collator, loss at the separators, AdamW) timed between its progress
callbacks, against a hand loop of forward + backward + AdamW on the backbone over the
same batches in the same order. Tokens are real (non-padding) tokens; ratios are
pipeline tokens/s divided by raw tokens/s (goal: >= 0.85 scoring, >= 0.8 training).

    python benchmarks/prm_throughput.py                       # CPU, builtin:minilm
    python benchmarks/prm_throughput.py --device cuda --backbone /models/Qwen2.5-Math-1.5B \\
        --batch-size 8 --num-solutions 512 --steps 12

On CUDA it also prints absolute tokens/s and MFU: 2 * N * tokens / s for scoring,
6 * N * tokens / s for training (N: ``matmul_params``; attention and the
gradient-checkpointing recompute not counted), over ``--peak-tflops`` (989: H100/H200 dense
bf16). ``benchmarks/gpu_check.py`` adds the attention term and runs on random Qwen2 shapes.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from activelearn.prm.batching import EpochBatchSampler, TrainingCollator, encode_examples, pad_batch  # noqa: E402
from activelearn.prm.data import LabeledSolution, LabeledStep, RatedCompletion, build_examples  # noqa: E402
from activelearn.prm.modeling import ProcessRewardModel  # noqa: E402
from activelearn.prm.scoring import score_solutions  # noqa: E402
from activelearn.prm.training import TrainConfig, train_prm  # noqa: E402

WORDS = [
    "let", "the", "value", "of", "x", "be", "equal", "to", "sum", "product", "two", "numbers",
    "so", "we", "find", "that", "therefore", "substitute", "into", "equation", "solve", "for",
    "y", "and", "check", "each", "case", "carefully",
]  # fmt: skip


def synthesise(count: int, steps: int, seed: int) -> list[LabeledSolution]:
    rng = random.Random(seed)

    def sentence(low: int, high: int) -> str:
        words = [
            rng.choice(WORDS) if rng.random() < 0.8 else str(rng.randint(0, 999)) for _ in range(rng.randint(low, high))
        ]
        return " ".join(words)

    return [
        LabeledSolution(
            problem_id=f"bench-{index}",
            problem=sentence(20, 60),
            steps=tuple(
                LabeledStep((RatedCompletion(sentence(8, 40), rng.choice((-1, 0, 1))),), chosen=0) for _ in range(steps)
            ),
        )
        for index in range(count)
    ]


def matmul_params(model: ProcessRewardModel) -> int:
    """N of the FLOP model: every parameter but the input embedding (a lookup, no FLOPs; the
    PRM has no LM head to reuse it), head included."""
    embedding = model.backbone.get_input_embeddings()
    assert isinstance(embedding, torch.nn.Embedding)
    return sum(p.numel() for p in model.parameters()) - embedding.weight.numel()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn: Callable[[], Any], device: torch.device) -> float:
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - start


def bench_scoring(args: argparse.Namespace, device: torch.device, solutions: list[LabeledSolution]) -> dict[str, Any]:
    model, tokenizer = ProcessRewardModel.from_backbone(args.backbone, max_length=args.max_length)
    model.to(device).eval()
    pairs = [(s.problem, tuple(step.completions[0].text for step in s.steps)) for s in solutions]
    encoder = model.step_encoder(tokenizer)
    windows = sorted((w for item in encoder.encode_many(pairs) for w in item), key=lambda w: len(w.input_ids))
    batches = [
        pad_batch([w.input_ids for w in windows[k : k + args.batch_size]], encoder.pad_id)
        for k in range(0, len(windows), args.batch_size)
    ]
    batches = [(ids.to(device), mask.to(device)) for ids, mask in batches]
    tokens = sum(int(mask.sum()) for _, mask in batches)
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    def raw() -> None:
        with torch.inference_mode(), autocast:
            for ids, mask in batches:
                model.backbone(input_ids=ids, attention_mask=mask, use_cache=False)

    def pipeline() -> None:
        score_solutions(model, tokenizer, pairs, batch_size=args.batch_size)

    # Warm-up: kernels, allocator, tokenizer caches.
    raw()
    pipeline()
    raw_times, pipeline_times = [], []
    for _ in range(args.repeats):  # interleaved so drift hits both sides alike
        raw_times.append(_timed(raw, device))
        pipeline_times.append(_timed(pipeline, device))
    params = matmul_params(model)
    return _summary("scoring", tokens, raw_times, pipeline_times, params, 2, device, args.peak_tflops)


def bench_training(args: argparse.Namespace, device: torch.device, solutions: list[LabeledSolution]) -> dict[str, Any]:
    cuda = device.type == "cuda"
    config_values: dict[str, Any] = dict(
        backbone=args.backbone,
        learning_rate=1e-6,
        num_epochs=1,
        batch_size=args.batch_size,
        max_length=args.max_length,
        warmup_ratio=0.0,
        checkpoint_every=0,
        seed=0,
        cpu=not cuda,
        # Fine-tuning is what is measured, whatever the backbone family's CPU default.
        freeze_layers=0,
    )
    # Rebuild exactly the batches train_prm will see, in its order.
    model, tokenizer = ProcessRewardModel.from_backbone(args.backbone, max_length=args.max_length)
    config_values["max_length"] = model.prm_config.max_length  # not the family's default
    sequences = encode_examples(model.step_encoder(tokenizer), build_examples(solutions))
    sampler = EpochBatchSampler([len(s.input_ids) for s in sequences], args.batch_size, 50, 0)
    collator = TrainingCollator(pad_id=model.step_encoder(tokenizer).pad_id, pad_to_multiple_of=8 if cuda else 1)
    batches = [collator([sequences[i] for i in batch]) for batch in sampler]
    steps = len(batches)
    if steps < 3:
        raise SystemExit("need at least 3 training batches; raise --num-solutions")
    timed_tokens = sum(int(b["attention_mask"].sum()) for b in batches[1:])  # step 1 is warm-up

    model.to(device).train()
    if cuda:
        model.enable_gradient_checkpointing()
    optimizer = torch.optim.AdamW(model.backbone.parameters(), lr=1e-6)
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=cuda)
    device_batches = [{k: v.to(device) for k, v in b.items()} for b in batches]

    def raw_step(batch: dict[str, torch.Tensor]) -> None:
        with autocast:
            hidden = model.backbone(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False
            ).last_hidden_state
        hidden.float().square().mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    raw_times, pipeline_times = [], []
    for repeat in range(args.repeats):
        raw_step(device_batches[0])
        raw_times.append(_timed(lambda: _run_all(raw_step, device_batches[1:]), device))
        pipeline_times.append(_time_train_prm(solutions, TrainConfig(output_dir=Path(), **config_values), repeat))
    params = matmul_params(model)
    return _summary("training", timed_tokens, raw_times, pipeline_times, params, 6, device, args.peak_tflops)


def _run_all(step: Callable[[dict[str, torch.Tensor]], None], batches: list[dict[str, torch.Tensor]]) -> None:
    for batch in batches:
        step(batch)


def _time_train_prm(solutions: list[LabeledSolution], config: TrainConfig, repeat: int) -> float:
    """Seconds from the end of optimizer step 1 to the end of the last step."""
    stamps: list[float] = []
    with tempfile.TemporaryDirectory() as scratch:
        config.output_dir = Path(scratch) / f"run{repeat}"
        train_prm(solutions, config, validation=[], progress=lambda *_: stamps.append(time.perf_counter()))
    return stamps[-1] - stamps[0]


def _summary(
    name: str,
    tokens: int,
    raw_times: list[float],
    pipeline_times: list[float],
    params: int,
    flops_per_param_token: int,
    device: torch.device,
    peak_tflops: float,
) -> dict[str, Any]:
    raw_rate = tokens / statistics.median(raw_times)
    pipeline_rate = tokens / statistics.median(pipeline_times)
    summary: dict[str, Any] = {
        "tokens_per_repeat": tokens,
        "raw_tokens_per_s": round(raw_rate, 1),
        "pipeline_tokens_per_s": round(pipeline_rate, 1),
        "ratio": round(pipeline_rate / raw_rate, 3),
        # Fastest repeat of each side: less sensitive to other load on a shared host.
        "ratio_best_repeat": round(min(raw_times) / min(pipeline_times), 3),
        "raw_seconds": [round(t, 4) for t in raw_times],
        "pipeline_seconds": [round(t, 4) for t in pipeline_times],
        "matmul_params": params,
    }
    if device.type == "cuda":
        peak = peak_tflops * 1e12
        summary["raw_mfu"] = round(flops_per_param_token * params * raw_rate / peak, 4)
        summary["pipeline_mfu"] = round(flops_per_param_token * params * pipeline_rate / peak, 4)
    goal = 0.85 if name == "scoring" else 0.8
    print(
        f"{name:8s} raw {raw_rate:10.1f} tok/s  pipeline {pipeline_rate:10.1f} tok/s  "
        f"ratio {pipeline_rate / raw_rate:.3f} (goal >= {goal})"
        + (f"  MFU {summary['pipeline_mfu']:.3f}" if "pipeline_mfu" in summary else ""),
        flush=True,
    )
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backbone", default="builtin:minilm")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--num-solutions", type=int, default=48)
    parser.add_argument("--steps", type=int, default=5, help="steps per solution")
    parser.add_argument("--max-length", type=int, default=None)
    parser.add_argument("--peak-tflops", type=float, default=989.0)
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--json", type=Path, default=None, help="also write the summary here")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    torch.manual_seed(0)
    solutions = synthesise(args.num_solutions, args.steps, seed=0)
    summary: dict[str, Any] = {
        "backbone": args.backbone,
        "device": str(device),
        "batch_size": args.batch_size,
        "repeats": args.repeats,
        "num_solutions": args.num_solutions,
        "steps_per_solution": args.steps,
        "torch_threads": torch.get_num_threads(),
        "scoring": bench_scoring(args, device, solutions),
    }
    if not args.skip_training:
        summary["training"] = bench_training(args, device, solutions)
    text = json.dumps(summary, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
