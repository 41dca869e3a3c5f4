"""The campaign simulator from a shell: both strategies on several seeds, and their report.

    python -m activelearn.simulation.cli --out var/simulation/default

Nothing here imports Django.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from activelearn.simulation.backbone import SIM_BACKBONES
from activelearn.simulation.campaign import CampaignConfig, compare_strategies
from activelearn.simulation.report import comparison_markdown, write_report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Simulated labeling campaigns: does convincing wrong-answer selection beat uniform?"
    )
    defaults = CampaignConfig()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--generations", type=int, default=defaults.generations)
    parser.add_argument("--labels-per-generation", type=int, default=defaults.labels_per_generation)
    parser.add_argument(
        "--backbone", default=defaults.backbone, help=f"sim:<name> ({', '.join(SIM_BACKBONES)}), tiny:llama, ..."
    )
    parser.add_argument("--backbone-cache", default=None, help="cache of sim: backbones (default VAR_DIR/simulation)")
    parser.add_argument("--train-problems", type=int, default=defaults.train_problems)
    parser.add_argument("--solutions-per-problem", type=int, default=defaults.solutions_per_problem)
    parser.add_argument("--fixed-pool", action="store_true", help="one pool for all generations instead of fresh")
    parser.add_argument("--eval-problems", type=int, default=defaults.eval_problems)
    parser.add_argument("--k-per-problem", type=int, default=defaults.k_per_problem, help="0: global top-K only")
    parser.add_argument("--subtle-share", type=float, default=defaults.domain.subtle_share)
    parser.add_argument(
        "--error-rate",
        type=float,
        default=defaults.domain.solution_error_rate,
        help="share of sampled solutions with an error (the pool's and held-out's; not the pretraining corpus's)",
    )
    parser.add_argument("--noise-rate", type=float, default=0.0)
    parser.add_argument("--epochs", type=int, default=defaults.num_epochs)
    parser.add_argument("--learning-rate", type=float, default=None)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument(
        "--freeze-layers", type=int, default=None, help="lower layers kept frozen (default: the backbone's recipe)"
    )
    parser.add_argument(
        "--step-features",
        nargs="*",
        default=None,
        help="what the PRM head reads beside the hidden state, e.g. surprise (none given: none; default: recipe)",
    )
    parser.add_argument(
        "--workers", type=int, default=2, help="seeds run in parallel, one torch thread each (1: in this process)"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    parser.add_argument("--out", type=Path, default=Path("var/simulation"))
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    started = time.monotonic()
    comparison = compare_strategies(
        args.seeds,
        progress=lambda message: print(f"[{time.monotonic() - started:6.0f}s] {message}", flush=True),
        workers=args.workers,
        generations=args.generations,
        labels_per_generation=args.labels_per_generation,
        backbone=args.backbone,
        backbone_cache=args.backbone_cache,
        train_problems=args.train_problems,
        solutions_per_problem=args.solutions_per_problem,
        pool="fixed" if args.fixed_pool else "fresh",
        eval_problems=args.eval_problems,
        k_per_problem=args.k_per_problem or None,
        noise_rate=args.noise_rate,
        domain=replace(defaults.domain, subtle_share=args.subtle_share, solution_error_rate=args.error_rate),
        num_epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        freeze_layers=args.freeze_layers,
        step_features=None if args.step_features is None else tuple(args.step_features),
    )
    paths = write_report(comparison, args.out)
    print(comparison_markdown(comparison))
    print("wrote", ", ".join(str(p) for p in paths.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
