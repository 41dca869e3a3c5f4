"""Simulated labeling campaigns: does convincing wrong-answer selection beat uniform?

Each generation: train a PRM on every label so far (the real ``train_prm``), score the
unlabeled pool with it (the real ``score_solutions``), pick ``labels_per_generation``
solutions with the strategy, have the oracle label them, and evaluate the PRM on held-out
problems. Generation 0 is a uniform seed set, identical for every strategy with the same
seed, so strategies are compared on paired runs.

Run from a shell (small CPU size, a few minutes)::

    python -m activelearn.simulation.campaign --seeds 0 1 --out var/simulation/small

Nothing here imports Django.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from activelearn.selection import PoolCandidate, Selected, select_convincing, select_uniform
from activelearn.simulation.domain import Dataset, DomainConfig, GeneratedSolution, build_dataset, problem_texts
from activelearn.simulation.oracle import OracleLabeler

Strategy = Literal["convincing", "uniform"]
STRATEGIES: tuple[Strategy, ...] = ("convincing", "uniform")
PRIMARY_METRIC = "first_error_f1"


@dataclass(frozen=True)
class CampaignConfig:
    generations: int = 4
    labels_per_generation: int = 120  # solutions sent to the oracle per generation
    seed: int = 0
    backbone: str = "tiny:llama"
    train_problems: int = 300
    solutions_per_problem: int = 8
    eval_problems: int = 60
    eval_solutions_per_problem: int = 16
    k_per_problem: int | None = 2  # cap per problem for convincing selection; None: global top-K only
    wrong_share: float = 0.8
    noise_rate: float = 0.0
    neutral_fillers: bool = True
    domain: DomainConfig = field(default_factory=DomainConfig)
    learning_rate: float | None = None  # None: 3e-3 for tiny: backbones, 5e-5 otherwise
    num_epochs: int = 4
    batch_size: int = 16
    max_length: int = 256
    best_of_n_sizes: tuple[int, ...] = (4, 16)
    threshold: float = 0.5
    score_batch_size: int = 64

    def resolved_learning_rate(self) -> float:
        if self.learning_rate is not None:
            return self.learning_rate
        return 3e-3 if self.backbone.startswith("tiny:") else 5e-5


@dataclass(frozen=True)
class GenerationMetrics:
    generation: int
    labeled_solutions: int  # cumulative
    step_labels: int  # cumulative ratings handed out
    selected_wrong_answer_share: float  # of this generation's picks, graded wrong
    selected_error_free_share: float  # of this generation's picks, no wrong step at all
    first_error_f1: float
    first_error_error_accuracy: float
    first_error_correct_accuracy: float
    step_auroc: float
    best_of_n: dict[int, dict[str, float]]  # n -> prm / majority / weighted accuracy
    train_seconds: float


@dataclass(frozen=True)
class CampaignResult:
    strategy: Strategy
    config: CampaignConfig
    generations: tuple[GenerationMetrics, ...]

    def curve(self, metric: str = PRIMARY_METRIC) -> list[tuple[float, float]]:
        return [(float(g.labeled_solutions), metric_value(g, metric)) for g in self.generations]


def metric_value(metrics: GenerationMetrics, metric: str) -> float:
    """A named metric; ``bon_prm@16`` / ``bon_majority@16`` read the best-of-N table."""
    if metric.startswith("bon_"):
        kind, n = metric[4:].split("@")
        return metrics.best_of_n[int(n)][kind]
    value = getattr(metrics, metric)
    assert isinstance(value, float)
    return value


# ------------------------------------------------------------------------- the loop


def _train_and_load(labeled: Sequence[Any], output_dir: Path, config: CampaignConfig) -> tuple[Any, Any, float]:
    import torch

    from activelearn.prm import ProcessRewardModel, TrainConfig, train_prm

    started = time.monotonic()
    final = output_dir / "final"
    if not (final / "prm_config.json").is_file():  # generation 0 is shared between strategies
        train_prm(
            labeled,
            TrainConfig(
                output_dir=output_dir,
                backbone=config.backbone,
                learning_rate=config.resolved_learning_rate(),
                num_epochs=config.num_epochs,
                batch_size=config.batch_size,
                max_length=config.max_length,
                # Fine-tune everything on a plain loss, whatever the backbone family's
                # defaults: the published campaign table was measured that way.
                freeze_layers=0,
                class_weighting="none",
                checkpoint_every=0,
                seed=config.seed,
            ),
            validation=[],
        )
    model, tokenizer = ProcessRewardModel.from_pretrained(final)
    if torch.cuda.is_available():
        model = model.to("cuda")
    return model, tokenizer, time.monotonic() - started


def _score(
    model: Any, tokenizer: Any, problems: dict[str, str], solutions: Sequence[GeneratedSolution], batch: int
) -> Any:
    from activelearn.prm import score_solutions

    return score_solutions(
        model, tokenizer, [(problems[s.problem_id], s.step_texts) for s in solutions], batch_size=batch
    )


def _evaluate(
    model: Any, tokenizer: Any, held_out: Dataset, config: CampaignConfig
) -> tuple[float, float, float, float, dict[int, dict[str, float]]]:
    from activelearn.prm.evaluation import Candidate, auroc, best_of_n, first_error_metrics

    solutions = held_out.all_solutions()
    scores = _score(model, tokenizer, problem_texts(held_out.problems), solutions, config.score_batch_size)
    first_error = first_error_metrics(
        [s.step_scores for s in scores], [g.first_error for g in solutions], config.threshold
    )
    # Step AUROC over the steps a phase-2 labeler would rate: up to the first error.
    step_scores: list[float] = []
    truths: list[bool] = []
    for generated, scored in zip(solutions, scores, strict=True):
        last = len(generated.steps) - 1 if generated.first_error is None else generated.first_error
        for index in range(last + 1):
            step_scores.append(scored.step_scores[index])
            truths.append(generated.steps[index].is_correct)
    by_problem: dict[str, list[Candidate]] = {}
    for generated, scored in zip(solutions, scores, strict=True):
        by_problem.setdefault(generated.problem_id, []).append(
            Candidate(score=scored.score, answer=generated.answer, is_correct=generated.final_correct)
        )
    table: dict[int, dict[str, float]] = {}
    for n in config.best_of_n_sizes:
        result = best_of_n(list(by_problem.values()), n, trials=10, seed=config.seed)
        table[n] = {
            "prm": result.prm_accuracy,
            "majority": result.majority_accuracy,
            "weighted": result.weighted_accuracy,
        }
    return first_error.f1, first_error.error_accuracy, first_error.correct_accuracy, auroc(step_scores, truths), table


def run_campaign(
    strategy: Strategy,
    generations: int = 4,
    labels_per_generation: int = 120,
    seed: int = 0,
    backbone: str = "tiny:llama",
    *,
    work_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
    **overrides: Any,
) -> CampaignResult:
    """One simulated campaign. ``overrides`` are any other ``CampaignConfig`` fields."""
    config = CampaignConfig(
        generations=generations,
        labels_per_generation=labels_per_generation,
        seed=seed,
        backbone=backbone,
        **overrides,
    )
    return run_campaign_config(strategy, config, work_dir=work_dir, progress=progress)


def run_campaign_config(
    strategy: Strategy,
    config: CampaignConfig,
    *,
    work_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> CampaignResult:
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    say = progress or (lambda message: None)
    owned = work_dir is None
    root = Path(tempfile.mkdtemp(prefix="campaign-")) if work_dir is None else Path(work_dir)
    try:
        pool = build_dataset(
            config.train_problems, config.solutions_per_problem, config.seed, config.domain, prefix="train"
        )
        held_out = build_dataset(
            config.eval_problems, config.eval_solutions_per_problem, config.seed, config.domain, prefix="eval"
        )
        texts = problem_texts(pool.problems)
        by_id = {s.solution_id: s for s in pool.all_solutions()}
        oracle = OracleLabeler(noise_rate=config.noise_rate, neutral_fillers=config.neutral_fillers, seed=config.seed)
        labeled: list[Any] = []
        labeled_ids: set[str] = set()
        scores: dict[str, float] = {}
        history: list[GenerationMetrics] = []
        for generation in range(config.generations):
            candidates = [
                PoolCandidate(s.problem_id, s.solution_id, scores.get(s.solution_id, 0.0), s.final_correct)
                for s in by_id.values()
            ]
            picks: list[Selected]
            if generation == 0 or strategy == "uniform":
                picks = select_uniform(
                    candidates, config.labels_per_generation, labeled_ids, seed=config.seed * 1000 + generation
                )
            else:
                picks = select_convincing(
                    candidates,
                    k_per_problem=config.k_per_problem,
                    k_total=config.labels_per_generation,
                    wrong_share=config.wrong_share,
                    exclude=labeled_ids,
                    seed=config.seed * 1000 + generation,
                )
            chosen = [by_id[str(pick.solution_id)] for pick in picks]
            for solution in chosen:
                labeled.append(oracle.label(texts[solution.problem_id], solution))
                labeled_ids.add(solution.solution_id)

            gen_dir = root / (f"seed-{config.seed}-gen-0" if generation == 0 else f"{strategy}-gen-{generation}")
            model, tokenizer, seconds = _train_and_load(labeled, gen_dir, config)
            f1, error_accuracy, correct_accuracy, step_auroc, bon = _evaluate(model, tokenizer, held_out, config)
            metrics = GenerationMetrics(
                generation=generation,
                labeled_solutions=oracle.solutions_labeled,
                step_labels=oracle.step_labels,
                selected_wrong_answer_share=sum(not s.final_correct for s in chosen) / max(1, len(chosen)),
                selected_error_free_share=sum(s.first_error is None for s in chosen) / max(1, len(chosen)),
                first_error_f1=f1,
                first_error_error_accuracy=error_accuracy,
                first_error_correct_accuracy=correct_accuracy,
                step_auroc=step_auroc,
                best_of_n=bon,
                train_seconds=seconds,
            )
            history.append(metrics)
            say(
                f"{strategy} seed={config.seed} gen={generation} labels={metrics.labeled_solutions} "
                f"f1={f1:.3f} auroc={step_auroc:.3f} picked_wrong={metrics.selected_wrong_answer_share:.2f}"
            )
            if strategy == "convincing" and generation + 1 < config.generations:
                unlabeled = [s for s in by_id.values() if s.solution_id not in labeled_ids]
                scored = _score(model, tokenizer, texts, unlabeled, config.score_batch_size)
                scores = {s.solution_id: r.score for s, r in zip(unlabeled, scored, strict=True)}
            if generation > 0:
                shutil.rmtree(gen_dir, ignore_errors=True)
        return CampaignResult(strategy=strategy, config=config, generations=tuple(history))
    finally:
        if owned:
            shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------ data efficiency


def labels_to_reach(curve: Sequence[tuple[float, float]], target: float) -> float | None:
    """Labels at which a (labels, metric) curve first reaches ``target``, linearly
    interpolated between generations; None if it never does."""
    previous: tuple[float, float] | None = None
    for labels, value in curve:
        if value >= target:
            if previous is None or value == previous[1]:
                return labels  # reached at the first point: an upper bound, not interpolated
            x0, y0 = previous
            return x0 + (target - y0) * (labels - x0) / (value - y0)
        previous = (labels, value)
    return None


def data_efficiency(active: Sequence[tuple[float, float]], uniform: Sequence[tuple[float, float]]) -> float | None:
    """How many times fewer labels active selection needs for the same quality.

    If active reaches uniform's final quality at L labels: uniform's final labels / L (>= 1).
    Otherwise, if uniform reaches active's final quality at L: L / active's final labels
    (< 1). None when neither curve reaches the other's end point (e.g. both flat),
    and when uniform's final quality is already met at active's first point: both
    campaigns share that first (uniform) generation, so uniform never improved on
    it and the ratio would only measure the length of the run.
    """
    needed = labels_to_reach(active, uniform[-1][1])
    if needed is not None and needed <= active[0][0] and uniform[-1][0] > active[0][0]:
        return None
    if needed is not None and needed > 0:
        return uniform[-1][0] / needed
    needed = labels_to_reach(uniform, active[-1][1])
    if needed is not None and active[-1][0] > 0:
        return needed / active[-1][0]
    return None


# ------------------------------------------------------------------------ comparison


@dataclass(frozen=True)
class Comparison:
    results: dict[Strategy, tuple[CampaignResult, ...]]  # one per seed, same seed order

    def mean_curve(self, strategy: Strategy, metric: str = PRIMARY_METRIC) -> list[tuple[float, float]]:
        curves = [result.curve(metric) for result in self.results[strategy]]
        return [
            (statistics.fmean(c[i][0] for c in curves), statistics.fmean(c[i][1] for c in curves))
            for i in range(len(curves[0]))
        ]

    def efficiency(self, metric: str = PRIMARY_METRIC) -> tuple[float | None, list[float | None]]:
        """(factor on the seed-mean curves, factor per seed)."""
        per_seed = [
            data_efficiency(a.curve(metric), u.curve(metric))
            for a, u in zip(self.results["convincing"], self.results["uniform"], strict=True)
        ]
        return data_efficiency(self.mean_curve("convincing", metric), self.mean_curve("uniform", metric)), per_seed

    def metrics(self) -> list[str]:
        config = self.results["uniform"][0].config
        n = max(config.best_of_n_sizes)
        return [PRIMARY_METRIC, "step_auroc", f"bon_prm@{n}", f"bon_majority@{n}"]

    def to_markdown(self) -> str:
        config = self.results["uniform"][0].config
        seeds = [r.config.seed for r in self.results["uniform"]]
        lines = [
            f"Backbone `{config.backbone}`, {config.train_problems} pool problems x {config.solutions_per_problem} "
            f"solutions, {config.eval_problems} held-out problems x {config.eval_solutions_per_problem}, "
            f"{config.generations} generations x {config.labels_per_generation} labeled solutions, "
            f"seeds {seeds}; values are means over seeds.",
            "",
            "| strategy | gen | labeled solutions | step labels | picked wrong-answer | "
            + " | ".join(self.metrics())
            + " |",
            "|---|---|---|---|---|" + "---|" * len(self.metrics()),
        ]
        for strategy in STRATEGIES:
            runs = self.results[strategy]
            for index in range(config.generations):
                rows = [run.generations[index] for run in runs]
                values = [statistics.fmean(metric_value(row, m) for row in rows) for m in self.metrics()]
                lines.append(
                    f"| {strategy} | {index} | {statistics.fmean(r.labeled_solutions for r in rows):.0f} | "
                    f"{statistics.fmean(r.step_labels for r in rows):.0f} | "
                    f"{statistics.fmean(r.selected_wrong_answer_share for r in rows):.2f} | "
                    + " | ".join(f"{v:.3f}" for v in values)
                    + " |"
                )
        lines.append("")
        for metric in self.metrics()[:3]:
            mean_factor, per_seed = self.efficiency(metric)
            shown = ", ".join(_factor(f) for f in per_seed)
            lines.append(
                f"- data efficiency on `{metric}` (labels uniform needs / labels convincing needs for uniform's "
                f"final quality): {_factor(mean_factor)} on the seed-mean curves; per seed: {shown}"
            )
        return "\n".join(lines) + "\n"

    def write_report(self, out_dir: Path) -> dict[str, Path]:
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = {
            "markdown": out_dir / "campaign.md",
            "svg": out_dir / "campaign.svg",
            "png": out_dir / "campaign.png",
            "json": out_dir / "campaign.json",
        }
        paths["markdown"].write_text(self.to_markdown())
        paths["svg"].write_text(self.to_svg())
        self.write_png(paths["png"])
        paths["json"].write_text(
            json.dumps({s: [_result_json(r) for r in runs] for s, runs in self.results.items()}, indent=2, default=str)
        )
        return paths

    def write_png(self, path: Path) -> None:
        """The same panels as ``to_svg``, drawn with matplotlib (imported here: only reports need it)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        panels = self.metrics()[:3]
        figure, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
        for ax, metric in zip(axes[0], panels, strict=True):
            for strategy in STRATEGIES:
                colour = _COLOURS[strategy]
                for run in self.results[strategy]:
                    xs, ys = zip(*run.curve(metric), strict=True)
                    ax.plot(xs, ys, color=colour, alpha=0.25, linewidth=1)
                mean = self.mean_curve(strategy, metric)
                if mean:
                    xs, ys = zip(*mean, strict=True)
                    ax.plot(xs, ys, color=colour, linewidth=2.5, marker="o", label=strategy)
            if metric.startswith("bon_prm"):
                reference = self.mean_curve("uniform", metric.replace("prm", "majority"))
                if reference:
                    xs, ys = zip(*reference, strict=True)
                    ax.plot(xs, ys, color="grey", linestyle="--", label="majority vote")
            ax.set_title(metric)
            ax.set_xlabel("labeled solutions")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        figure.tight_layout()
        figure.savefig(path, dpi=110)
        plt.close(figure)

    def to_svg(self) -> str:
        panels = self.metrics()[:3]
        return render_svg(
            [
                (
                    metric,
                    {s: [r.curve(metric) for r in self.results[s]] for s in STRATEGIES},
                    self.mean_curve("uniform", panels[2].replace("prm", "majority"))
                    if metric.startswith("bon_prm")
                    else None,
                )
                for metric in panels
            ]
        )


def _factor(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def _result_json(result: CampaignResult) -> dict[str, Any]:
    config = asdict(result.config)
    return {"strategy": result.strategy, "config": config, "generations": [asdict(g) for g in result.generations]}


def compare_strategies(
    seeds: Sequence[int] = (0,),
    *,
    work_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
    **config: Any,
) -> Comparison:
    """Both strategies on the same seeds; ``config`` holds ``CampaignConfig`` fields."""
    results: dict[Strategy, list[CampaignResult]] = {s: [] for s in STRATEGIES}
    root = Path(tempfile.mkdtemp(prefix="campaigns-")) if work_dir is None else Path(work_dir)
    try:
        for seed in seeds:
            base = CampaignConfig(seed=seed, **config)
            for strategy in STRATEGIES:
                results[strategy].append(
                    run_campaign_config(strategy, replace(base), work_dir=root / f"seed-{seed}", progress=progress)
                )
    finally:
        if work_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    return Comparison({s: tuple(r) for s, r in results.items()})


# ---------------------------------------------------------------------------- SVG plot

_COLOURS = {"convincing": "#d6604d", "uniform": "#4393c3"}


def render_svg(
    panels: Sequence[tuple[str, dict[Strategy, list[list[tuple[float, float]]]], list[tuple[float, float]] | None]],
) -> str:
    """Metric vs labeled solutions, one panel per metric: thin lines per seed, thick for the
    mean; an optional dashed reference curve (majority vote). No plotting library needed."""
    width, height, margin = 320, 240, 44
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width * len(panels)}" height="{height + 30}" '
        'font-family="sans-serif" font-size="11">',
        '<rect width="100%" height="100%" fill="white"/>',
    ]
    for panel, (metric, curves, reference) in enumerate(panels):
        x0 = panel * width
        points = [p for runs in curves.values() for run in runs for p in run] + (reference or [])
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        x_lo, x_hi = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
        y_lo, y_hi = math.floor(min(ys) * 20) / 20, math.ceil(max(ys) * 20) / 20
        y_hi = y_hi if y_hi > y_lo else y_lo + 0.05

        def sx(x: float, x0: float = x0, x_lo: float = x_lo, x_hi: float = x_hi) -> float:
            return x0 + margin + (x - x_lo) / (x_hi - x_lo) * (width - 1.5 * margin)

        def sy(y: float, y_lo: float = y_lo, y_hi: float = y_hi) -> float:
            return height - margin + 10 - (y - y_lo) / (y_hi - y_lo) * (height - 1.5 * margin)

        parts.append(f'<text x="{x0 + width / 2}" y="14" text-anchor="middle" font-weight="bold">{metric}</text>')
        parts.append(
            f'<line x1="{sx(x_lo)}" y1="{sy(y_lo)}" x2="{sx(x_hi)}" y2="{sy(y_lo)}" stroke="black"/>'
            f'<line x1="{sx(x_lo)}" y1="{sy(y_lo)}" x2="{sx(x_lo)}" y2="{sy(y_hi)}" stroke="black"/>'
        )
        for y in (y_lo, (y_lo + y_hi) / 2, y_hi):
            parts.append(f'<text x="{sx(x_lo) - 4}" y="{sy(y) + 4}" text-anchor="end">{y:.2f}</text>')
        for x in (x_lo, x_hi):
            parts.append(f'<text x="{sx(x)}" y="{sy(y_lo) + 14}" text-anchor="middle">{x:.0f}</text>')
        parts.append(f'<text x="{x0 + width / 2}" y="{height + 20}" text-anchor="middle">labeled solutions</text>')

        def path(curve: Sequence[tuple[float, float]]) -> str:
            return " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in curve)

        for strategy, runs in curves.items():
            colour = _COLOURS.get(strategy, "gray")
            for run in runs:
                parts.append(f'<polyline points="{path(run)}" fill="none" stroke="{colour}" stroke-opacity="0.3"/>')
            mean = [
                (statistics.fmean(r[i][0] for r in runs), statistics.fmean(r[i][1] for r in runs))
                for i in range(len(runs[0]))
            ]
            parts.append(f'<polyline points="{path(mean)}" fill="none" stroke="{colour}" stroke-width="2.5"/>')
        if reference:
            parts.append(f'<polyline points="{path(reference)}" fill="none" stroke="gray" stroke-dasharray="4 3"/>')
        for row, strategy in enumerate(curves):
            y = 28 + row * 14
            parts.append(
                f'<line x1="{x0 + margin + 6}" y1="{y - 4}" x2="{x0 + margin + 22}" y2="{y - 4}" '
                f'stroke="{_COLOURS.get(strategy, "gray")}" stroke-width="2.5"/>'
                f'<text x="{x0 + margin + 26}" y="{y}">{strategy}</text>'
            )
        if reference:
            parts.append(f'<text x="{x0 + margin + 26}" y="{28 + len(curves) * 14}">majority vote (dashed)</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


# -------------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--labels-per-generation", type=int, default=120)
    parser.add_argument("--backbone", default="tiny:llama")
    parser.add_argument("--train-problems", type=int, default=300)
    parser.add_argument("--solutions-per-problem", type=int, default=8)
    parser.add_argument("--eval-problems", type=int, default=60)
    parser.add_argument("--k-per-problem", type=int, default=2, help="0: global top-K only")
    parser.add_argument("--noise-rate", type=float, default=0.0)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--learning-rate", type=float, default=None)
    parser.add_argument("--out", type=Path, default=Path("var/simulation"))
    args = parser.parse_args(argv)
    started = time.monotonic()
    comparison = compare_strategies(
        args.seeds,
        progress=lambda message: print(f"[{time.monotonic() - started:6.0f}s] {message}", flush=True),
        generations=args.generations,
        labels_per_generation=args.labels_per_generation,
        backbone=args.backbone,
        train_problems=args.train_problems,
        solutions_per_problem=args.solutions_per_problem,
        eval_problems=args.eval_problems,
        k_per_problem=args.k_per_problem or None,
        noise_rate=args.noise_rate,
        num_epochs=args.epochs,
        learning_rate=args.learning_rate,
    )
    paths = comparison.write_report(args.out)
    print(comparison.to_markdown())
    print("wrote", ", ".join(str(p) for p in paths.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
