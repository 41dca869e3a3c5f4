"""A comparison written out: its markdown table, an SVG and a PNG plot, and its JSON."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from activelearn.simulation.campaign import STRATEGIES, UNITS, CampaignResult, Comparison, Strategy, metric_value
from activelearn.simulation.stats import BOOTSTRAP_RESAMPLES, mean_interval, t_quantile


def _factor(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def _interval(values: Sequence[float]) -> str:
    mean, half = mean_interval(values)
    return f"{mean:.3f} ± {half:.3f}"


def _result_json(result: CampaignResult) -> dict[str, Any]:
    config = asdict(result.config)
    return {
        "strategy": result.strategy,
        "config": config,
        "zero_shot_auroc": result.zero_shot_auroc,
        "generations": [asdict(g) for g in result.generations],
    }


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


def comparison_markdown(comparison: Comparison) -> str:
    config = comparison.results["uniform"][0].config
    seeds = [r.config.seed for r in comparison.results["uniform"]]
    count = len(seeds)
    pool = (
        "a fresh pool of solutions per generation"
        if config.pool == "fresh"
        else "one fixed pool (labeled solutions removed)"
    )
    timing = ""
    if comparison.wall_seconds is not None:
        timing = f" Wall time {comparison.wall_seconds / 60:.1f} min"
        timing += (
            f" (pretraining {comparison.pretrain_seconds / 60:.1f} min of it)."
            if comparison.pretrain_seconds
            else " (backbone from the cache)."
        )
    lines = [
        f"Backbone `{config.backbone}`, {config.train_problems} pool problems x {config.solutions_per_problem} "
        f"solutions ({pool}), {config.eval_problems} held-out problems x {config.eval_solutions_per_problem}, "
        f"{config.generations} generations x {config.labels_per_generation} labeled solutions, "
        f"{config.num_epochs} epochs at learning rate {config.resolved_learning_rate():g}, seeds {seeds}.{timing}",
        "",
        f"Cells: mean over the {count} seeds ± the half-width of its 95% Student-t interval "
        f"(t = {t_quantile(max(1, count - 1)):.3f}, {max(1, count - 1)} degrees of freedom).",
        "",
        "| strategy | gen | labeled solutions | step labels | picked wrong-answer | picked subtle error | "
        + " | ".join(comparison.metrics())
        + " |",
        "|---|---|---|---|---|---|" + "---|" * len(comparison.metrics()),
    ]
    for strategy in STRATEGIES:
        runs = comparison.results[strategy]
        for index in range(config.generations):
            rows = [run.generations[index] for run in runs]
            cells = [_interval([metric_value(row, m) for row in rows]) for m in comparison.metrics()]
            lines.append(
                f"| {strategy} | {index} | {statistics.fmean(r.labeled_solutions for r in rows):.0f} | "
                f"{statistics.fmean(r.step_labels for r in rows):.0f} | "
                f"{statistics.fmean(r.selected_wrong_answer_share for r in rows):.2f} | "
                f"{statistics.fmean(r.selected_subtle_share for r in rows):.2f} | " + " | ".join(cells) + " |"
            )
    zero_shot = [r.zero_shot_auroc for r in comparison.results["uniform"] if r.zero_shot_auroc is not None]
    if zero_shot:
        lines += [
            "",
            "Baselines of `step_auroc`: random 0.500; the frozen backbone's summed surprise at each step's "
            f"tokens, no labels: {_interval(zero_shot)}. Of `bon_prm@N`: majority vote (the last column).",
        ]
    lines += [
        "",
        "Held-out first-error localisation at the last generation, by the first error's kind "
        "(subtle: off by 1, 2 or 10, or one digit changed):",
        "",
        "| strategy | subtle errors found | obvious errors found | error-free solutions passed |",
        "|---|---|---|---|",
    ]
    for strategy in STRATEGIES:
        last = [run.generations[-1] for run in comparison.results[strategy]]
        lines.append(
            f"| {strategy} | {_interval([g.error_accuracy_subtle for g in last])} | "
            f"{_interval([g.error_accuracy_obvious for g in last])} | "
            f"{_interval([g.first_error_correct_accuracy for g in last])} |"
        )
    lines += [
        "",
        "Data efficiency: the labels uniform spent for its final quality divided by the labels convincing "
        "needs to reach that quality (linear interpolation between neighbouring generations of the "
        "convincing curve). When convincing never reaches it, the labels uniform needs to reach convincing's "
        "final quality divided by convincing's final labels (< 1x). n/a: neither curve reaches the other's "
        "end, or convincing's first (shared, uniform) generation already matches uniform's end. Budget in "
        "labeled solutions and in step labels (the ratings they cost). 95% interval: percentile bootstrap "
        f"over seeds ({BOOTSTRAP_RESAMPLES} paired resamples, factor recomputed on the resampled mean curves).",
        "",
        "| metric | budget unit | on mean curves | 95% bootstrap interval | per seed |",
        "|---|---|---|---|---|",
    ]
    for metric in comparison.metrics()[:4]:  # every metric of the PRM (not majority vote)
        for unit in UNITS:
            found = comparison.efficiency(metric, unit)
            interval = "n/a" if found.interval is None else f"{found.interval[0]:.2f}x to {found.interval[1]:.2f}x"
            if found.undefined_resamples:
                interval += f" ({found.undefined_resamples} of {found.resamples} resamples n/a)"
            lines.append(
                f"| `{metric}` | {unit.replace('_', ' ')} | {_factor(found.on_mean_curves)} | {interval} | "
                + ", ".join(_factor(f) for f in found.per_seed)
                + " |"
            )
    return "\n".join(lines) + "\n"


def write_report(comparison: Comparison, out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "markdown": out_dir / "campaign.md",
        "svg": out_dir / "campaign.svg",
        "png": out_dir / "campaign.png",
        "json": out_dir / "campaign.json",
    }
    paths["markdown"].write_text(comparison_markdown(comparison))
    paths["svg"].write_text(comparison_svg(comparison))
    write_png(comparison, paths["png"])
    payload: dict[str, Any] = {s: [_result_json(r) for r in runs] for s, runs in comparison.results.items()}
    payload["wall_seconds"] = comparison.wall_seconds
    payload["pretrain_seconds"] = comparison.pretrain_seconds
    paths["json"].write_text(json.dumps(payload, indent=2, default=str))
    return paths


def write_png(comparison: Comparison, path: Path) -> None:
    """Metric vs labeled solutions per panel: thin lines per seed, the seed mean with its
    95% t-interval as a band (matplotlib imported here: only reports need it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = comparison.metrics()[:3]
    figure, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, metric in zip(axes[0], panels, strict=True):
        for strategy in STRATEGIES:
            colour = _COLOURS[strategy]
            for run in comparison.results[strategy]:
                run_x, run_y = zip(*run.curve(metric), strict=True)
                ax.plot(run_x, run_y, color=colour, alpha=0.2, linewidth=1)
            rows = list(zip(*(run.generations for run in comparison.results[strategy]), strict=True))
            xs = [statistics.fmean(g.labeled_solutions for g in row) for row in rows]
            spans = [mean_interval([metric_value(g, metric) for g in row]) for row in rows]
            means = [m for m, _ in spans]
            ax.fill_between(
                xs, [m - h for m, h in spans], [m + h for m, h in spans], color=colour, alpha=0.15, linewidth=0
            )
            ax.plot(xs, means, color=colour, linewidth=2.5, marker="o", label=strategy)
        if metric.startswith("bon_prm"):
            reference = comparison.mean_curve("uniform", metric.replace("prm", "majority"))
            if reference:
                rx, ry = zip(*reference, strict=True)
                ax.plot(rx, ry, color="grey", linestyle="--", label="majority vote")
        ax.set_title(metric)
        ax.set_xlabel("labeled solutions")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def comparison_svg(comparison: Comparison) -> str:
    panels = comparison.metrics()[:3]
    return render_svg(
        [
            (
                metric,
                {s: [r.curve(metric) for r in comparison.results[s]] for s in STRATEGIES},
                comparison.mean_curve("uniform", panels[2].replace("prm", "majority"))
                if metric.startswith("bon_prm")
                else None,
            )
            for metric in panels
        ]
    )
