"""The small-scale study in the systematic-error domain: every arm at equal budgets.

``run_study`` runs the arms of ``activelearn.simulation.arms`` on the same seeds (fresh
pools per generation, the same held-out problems), ``Study.to_markdown`` reports:

* per arm, each metric against labeled solutions (mean over seeds ± 95% t-interval),
  beside majority vote and the label-free baseline (the frozen LM's surprise);
* the data efficiency of each convincing arm against uniform on best-of-16 and
  first-error F1, with its paired bootstrap interval (``stats.bootstrap_efficiency``);
* PRM against ORM on the same labeled solutions, and the ORM on the whole graded pool;
* Math-Shepherd's automatic labels against the oracle's on the same solutions.

``run_sweep`` runs uniform against the main convincing arm over the systematic share of
the generator's errors (``DomainConfig.systematic_share``), each share with a backbone
pretrained on that generator's samples, and reports the factor as a function of it.

Run from a shell::

    python -m activelearn.simulation.study --out var/simulation/study
    python -m activelearn.simulation.study --sweep 0 0.5 1 --out var/simulation/sweep

Nothing here imports Django.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from activelearn.prm.recipes import PRETRAIN_FILE
from activelearn.simulation.arms import ARMS, MAIN_CONVINCING, arm_named
from activelearn.simulation.backbone import HOME_DOMAIN, SYSTEMATIC_DOMAIN, default_cache_root
from activelearn.simulation.campaign import (
    UNITS,
    CampaignConfig,
    CampaignResult,
    GenerationMetrics,
    Unit,
    metric_value,
    pretrain_config,
    resolve_backbone,
    run_campaign_config,
)
from activelearn.simulation.domain import DomainConfig
from activelearn.simulation.stats import (
    BOOTSTRAP_RESAMPLES,
    bootstrap_efficiency,
    data_efficiency,
    mean_curve,
    mean_interval,
    t_quantile,
)


# The study's generators (``--domain``), each with the backbone pretrained on its samples.
# "home" (the default) holds three misconceptions, each only in its two home settings, so
# it is right about 73% of the time and wrong where it believes it is right (majority vote
# 0.70 over 16 samples of 300 problems): the paper's regime, where a uniform sample is
# mostly right and convincing wrong-answer selection has something to add. Not
# `buy_as_containers`: it writes a product the LM cannot compute in its head, so the LM's
# surprise finds that error whatever the generator believes (step AUROC 0.997 on its
# errors alone). "misconceptions" holds all five, at 0.9 at home and 0.25 elsewhere: wrong
# three times in four, so a uniform sample is already a wrong-answer sample.
@dataclass(frozen=True)
class StudyDomain:
    config: DomainConfig
    backbone: str


DOMAINS: dict[str, StudyDomain] = {
    "home": StudyDomain(HOME_DOMAIN, "sim:home"),
    "misconceptions": StudyDomain(SYSTEMATIC_DOMAIN, "sim:systematic"),
}
DEFAULT_DOMAIN = "home"

# The study's campaign: budgets where the curves still climb (see docs). The head reads
# the frozen LM's hidden state only: in these domains the LM's surprise ranks steps near
# chance, and without it the backbone's output is cached (CampaignConfig.feature_cache),
# so nine arms cost about one forward pass per text. Rate and epochs: at the family's
# 1e-3 x 6 epochs the head is still underfit at 100 labeled solutions.
STUDY_DEFAULTS: dict[str, Any] = dict(
    backbone=DOMAINS[DEFAULT_DOMAIN].backbone,
    domain=DOMAINS[DEFAULT_DOMAIN].config,
    generations=5,
    labels_per_generation=20,
    train_problems=100,
    solutions_per_problem=8,
    eval_problems=60,
    eval_solutions_per_problem=16,
    pretrain_on_domain=True,
    step_features=(),
    learning_rate=1e-2,
    num_epochs=20,
)
# The sweep changes the generator's systematic share; pools, budgets and backbone schedule
# are the study's. Its head also reads the LM's surprise, as the random-error campaign's
# does: at share 0 that is what today's PRM reads (a head on the hidden state alone does
# not learn random corruptions: step AUROC 0.56 at 100 labels, 10 seeds), and at share 1 the
# surprise ranks steps near chance, so it adds little there.
SWEEP_DEFAULTS: dict[str, Any] = {**STUDY_DEFAULTS, "step_features": None}
STUDY_ARMS: tuple[str, ...] = tuple(ARMS)
# Ten seeds: the home study costs about a minute of CPU per seed with the backbone cached,
# and at three seeds a t-interval (t = 4.3) is wider than most of the effects it measures.
DEFAULT_SEEDS: tuple[int, ...] = tuple(range(10))
SWEEP_ARMS: tuple[str, ...] = ("uniform", MAIN_CONVINCING)


def efficiency_metrics(config: CampaignConfig) -> tuple[str, str]:
    """Best-of-N at the largest N, and first-error F1: the goals' two metrics."""
    return f"bon_prm@{max(config.best_of_n_sizes)}", "first_error_f1"


def _metrics(n: int) -> list[str]:
    return ["first_error_f1", "step_auroc", f"bon_prm@{n}", f"bon_prm_min@{n}"]


def _cell(values: Sequence[float]) -> str:
    mean, half = mean_interval(values)
    return f"{mean:.3f} ± {half:.3f}"


def _factor(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


@dataclass(frozen=True)
class Efficiency:
    factor: float | None
    interval: tuple[float, float] | None
    undefined: int
    per_seed: list[float | None]

    def interval_text(self) -> str:
        text = "n/a" if self.interval is None else f"{self.interval[0]:.2f}x to {self.interval[1]:.2f}x"
        if self.undefined:
            text += f" ({self.undefined} of {BOOTSTRAP_RESAMPLES} resamples n/a)"
        return text


@dataclass(frozen=True)
class Study:
    results: dict[str, tuple[CampaignResult, ...]]  # arm name -> one result per seed
    wall_seconds: float | None = None
    pretrain_seconds: float | None = None

    @property
    def config(self) -> CampaignConfig:
        return next(iter(self.results.values()))[0].config

    @property
    def seeds(self) -> list[int]:
        return [r.config.seed for r in next(iter(self.results.values()))]

    def curves(self, arm: str, metric: str, unit: Unit = "solutions") -> list[list[tuple[float, float]]]:
        return [result.curve(metric, unit) for result in self.results[arm]]

    def efficiency(self, arm: str, metric: str, unit: Unit = "solutions") -> Efficiency:
        active, uniform = self.curves(arm, metric, unit), self.curves("uniform", metric, unit)
        interval, undefined = bootstrap_efficiency(active, uniform)
        return Efficiency(
            factor=data_efficiency(mean_curve(active), mean_curve(uniform)),
            interval=interval,
            undefined=undefined,
            per_seed=[data_efficiency(a, u) for a, u in zip(active, uniform, strict=True)],
        )

    def surprise_auroc(self) -> list[float]:
        return [r.zero_shot_auroc for r in next(iter(self.results.values())) if r.zero_shot_auroc is not None]

    def baseline_line(self) -> str:
        n = max(self.config.best_of_n_sizes)
        surprise = self.surprise_auroc()
        majority = [r.generations[-1].best_of_n[n]["majority"] for r in next(iter(self.results.values()))]
        text = f"Baselines: majority vote over {n} samples answers {_cell(majority)} of held-out problems right"
        if "uniform" in self.results:
            uniform = self.results["uniform"]
            above = [r.generations[-1].best_of_n[n]["prm"] - m for r, m in zip(uniform, majority, strict=True)]
            text += f" (the uniform arm's PRM at the end, best-of-{n} minus majority vote, paired: {_cell(above)})"
        if surprise:
            text += f"; the frozen LM's label-free surprise ranks held-out steps at step AUROC {_cell(surprise)}"
        return text + " (random: 0.500)."

    def header(self) -> str:
        config = self.config
        timing = ""
        if self.wall_seconds is not None:
            timing = f" Wall time {self.wall_seconds / 60:.1f} min"
            timing += (
                f" (pretraining {self.pretrain_seconds / 60:.1f} min of it)."
                if self.pretrain_seconds
                else " (backbone from the cache)."
            )
        domain = config.domain
        corpus = "the campaign's generator" if config.pretrain_on_domain else "its own corpus"
        held = (
            ""
            if domain.held_misconceptions is None
            else f"only {', '.join(f'`{name}`' for name in domain.held_misconceptions)} held; "
        )
        return (
            f"Domain: systematic share {domain.systematic_share:g} ({held}misconceptions held at "
            f"{domain.misconception_home_rate:g} in their home settings, {domain.misconception_rate:g} elsewhere, "
            f"times the share; random errors at {domain.solution_error_rate:g} x (1 - share)). Backbone "
            f"`{config.backbone}` pretrained on {corpus}'s samples. {config.train_problems} pool problems x "
            f"{config.solutions_per_problem} solutions, fresh each generation; {config.eval_problems} held-out "
            f"problems x {config.eval_solutions_per_problem}; {config.generations} generations x "
            f"{config.labels_per_generation} solutions; {config.rollouts} rollouts per step for Math-Shepherd; seeds "
            f"{self.seeds}.{timing} Cells: mean over the {len(self.seeds)} seeds ± the half-width of its 95% "
            f"Student-t interval (t = {t_quantile(max(1, len(self.seeds) - 1)):.3f})."
        )

    def to_markdown(self) -> str:
        config = self.config
        n = max(config.best_of_n_sizes)
        lines = [self.header(), "", self.baseline_line(), ""]
        for metric in (f"bon_prm@{n}", "first_error_f1", "step_auroc"):
            lines += [*self._curve_table(metric), ""]
        lines += [*self._efficiency_table(), ""]
        lines += self._paired_table(
            "PRM against ORM at equal labeled solutions (the uniform sample: step labels for the PRM, graded "
            "answers for `orm`; `orm-pool` trains on every graded pool solution drawn so far, which costs no "
            "label). Last generation; difference: PRM minus the ORM, paired by seed.",
            "uniform",
            ("orm", "orm-pool"),
        )
        lines += [
            "",
            *self._paired_table(
                "Automatic process labels (Math-Shepherd, rollouts of the generator; no human label) against the "
                "oracle's on the same solutions. Last generation; difference: oracle minus automatic, paired by seed.",
                "uniform",
                ("shepherd-hard", "shepherd-soft"),
            ),
        ]
        return "\n".join(lines) + "\n"

    def _curve_table(self, metric: str) -> list[str]:
        first = next(iter(self.results.values()))
        budgets = [g.labeled_solutions for g in first[0].generations]
        lines = [
            f"`{metric}` by labeled solutions ({self.baseline_name(metric)}):",
            "",
            "| arm | " + " | ".join(str(b) for b in budgets) + " | human step labels at the end |",
            "|---|" + "---|" * (len(budgets) + 1),
        ]
        for arm, runs in self.results.items():
            cells = [_cell([metric_value(r.generations[i], metric) for r in runs]) for i in range(len(budgets))]
            steps = statistics.fmean(r.generations[-1].step_labels for r in runs)
            lines.append(f"| {arm} | " + " | ".join(cells) + f" | {steps:.0f} |")
        if metric.startswith("bon_prm@"):
            majority = metric.replace("prm", "majority")
            cells = [_cell([metric_value(r.generations[i], majority) for r in first]) for i in range(len(budgets))]
            lines.append("| majority vote | " + " | ".join(cells) + " | 0 |")
        return lines

    def baseline_name(self, metric: str) -> str:
        if metric == "step_auroc":
            surprise = self.surprise_auroc()
            return f"label-free surprise {_cell(surprise)}, random 0.500" if surprise else "random 0.500"
        if metric.startswith("bon_prm@"):
            return "majority vote in the last row"
        return "a PRM that flags nothing scores 0 on erroneous solutions"

    def _efficiency_table(self) -> list[str]:
        arms = [arm for arm in self.results if ARMS.get(arm) is not None and arm_named(arm).selection == "convincing"]
        lines = [
            "Data efficiency against uniform (labels uniform spent for its final quality / labels the arm needs "
            "for it, interpolated between generations; < 1x: the arm never reaches it). 95% interval: paired "
            f"percentile bootstrap over seeds ({BOOTSTRAP_RESAMPLES} resamples).",
            "",
            "| arm | metric | budget unit | factor | 95% bootstrap interval | per seed |",
            "|---|---|---|---|---|---|",
        ]
        for arm in arms:
            for metric in efficiency_metrics(self.config):
                for unit in UNITS:
                    found = self.efficiency(arm, metric, unit)
                    lines.append(
                        f"| {arm} | `{metric}` | {unit.replace('_', ' ')} | {_factor(found.factor)} | "
                        f"{found.interval_text()} | " + ", ".join(_factor(f) for f in found.per_seed) + " |"
                    )
        return lines

    def _paired_table(self, title: str, reference: str, others: Sequence[str]) -> list[str]:
        present = [arm for arm in others if arm in self.results]
        if reference not in self.results or not present:
            return []
        n = max(self.config.best_of_n_sizes)
        metrics = [f"bon_prm@{n}", "first_error_f1", "step_auroc"]
        lines = [
            title,
            "",
            "| arm | trained on (solutions) | "
            + " | ".join(f"`{m}`" for m in metrics)
            + " | "
            + " | ".join(f"difference in `{m}`" for m in metrics)
            + " |",
            "|---|---|" + "---|" * (2 * len(metrics)),
        ]
        base = [r.generations[-1] for r in self.results[reference]]
        for arm in [reference, *present]:
            last = [r.generations[-1] for r in self.results[arm]]
            cells = [_cell([metric_value(g, m) for g in last]) for m in metrics]
            if arm == reference:
                diffs = ["" for _ in metrics]
            else:
                diffs = [
                    _cell([metric_value(b, m) - metric_value(g, m) for b, g in zip(base, last, strict=True)])
                    for m in metrics
                ]
            trained = statistics.fmean(g.trained_on for g in last)
            lines.append(f"| {arm} | {trained:.0f} | " + " | ".join(cells) + " | " + " | ".join(diffs) + " |")
        return lines

    def write_report(self, out_dir: Path, name: str = "study") -> dict[str, Path]:
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = {"markdown": out_dir / f"{name}.md", "png": out_dir / f"{name}.png", "json": out_dir / f"{name}.json"}
        paths["markdown"].write_text(self.to_markdown())
        self.write_png(paths["png"])
        paths["json"].write_text(json.dumps(self.to_json(), indent=1, default=str))
        return paths

    def to_json(self) -> dict[str, Any]:
        return {
            "wall_seconds": self.wall_seconds,
            "pretrain_seconds": self.pretrain_seconds,
            "arms": {arm: [_result_json(r) for r in runs] for arm, runs in self.results.items()},
        }

    @classmethod
    def from_work_dir(cls, work_dir: Path, wall_seconds: float | None = None) -> Study:
        """The arms every seed under ``work_dir`` finished (``seed-N/<arm>.json``), in arm order."""
        seeds = sorted(work_dir.glob("seed-*"), key=lambda p: int(p.name.removeprefix("seed-")))
        done = [arm for arm in ARMS if seeds and all((seed / f"{arm}.json").is_file() for seed in seeds)]
        if "uniform" not in done:
            raise ValueError(f"no seed under {work_dir} has finished the uniform arm in every seed")
        payload = {
            "wall_seconds": wall_seconds,
            "arms": {arm: [json.loads((seed / f"{arm}.json").read_text()) for seed in seeds] for arm in done},
        }
        return cls.from_json(payload)

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> Study:
        """The study ``to_json`` wrote (``study.json``)."""
        results = {
            arm: tuple(
                CampaignResult(
                    strategy=arm,
                    config=_config_from_json(run["config"]),
                    generations=tuple(_generation_from_json(g) for g in run["generations"]),
                    zero_shot_auroc=run["zero_shot_auroc"],
                )
                for run in runs
            )
            for arm, runs in payload["arms"].items()
        }
        return cls(results, payload.get("wall_seconds"), payload.get("pretrain_seconds"))

    @classmethod
    def merged(cls, parts: Sequence[Study]) -> Study:
        """Seeds run as separate studies (one process each), reported as one; wall time:
        the longest part's, as they ran side by side."""
        arms = list(parts[0].results)
        if any(list(part.results) != arms for part in parts):
            raise ValueError("studies to merge must run the same arms in the same order")
        walls = [part.wall_seconds for part in parts if part.wall_seconds is not None]
        return cls(
            {arm: tuple(run for part in parts for run in part.results[arm]) for arm in arms},
            wall_seconds=max(walls) if walls else None,
            pretrain_seconds=None,
        )

    def write_png(self, path: Path) -> None:
        """Each arm's seed-mean curve per metric; majority vote dashed; matplotlib only here."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        n = max(self.config.best_of_n_sizes)
        panels = [f"bon_prm@{n}", "first_error_f1", "step_auroc"]
        figure, axes = plt.subplots(1, len(panels), figsize=(5.0 * len(panels), 4.0), squeeze=False)
        colours = plt.get_cmap("tab10")
        for ax, metric in zip(axes[0], panels, strict=True):
            for index, (arm, runs) in enumerate(self.results.items()):
                curve = mean_curve([r.curve(metric) for r in runs])
                xs, ys = zip(*curve, strict=True)
                style = "-" if ARMS.get(arm) is None or arm_named(arm).labels == "oracle" else ":"
                ax.plot(xs, ys, style, color=colours(index % 10), marker="o", markersize=3, label=arm)
            if metric.startswith("bon_prm"):
                runs = next(iter(self.results.values()))
                curve = mean_curve([r.curve(metric.replace("prm", "majority")) for r in runs])
                xs, ys = zip(*curve, strict=True)
                ax.plot(xs, ys, "--", color="grey", label="majority vote")
            if metric == "step_auroc" and self.surprise_auroc():
                ax.axhline(statistics.fmean(self.surprise_auroc()), color="black", linestyle="--", linewidth=1)
                ax.text(ax.get_xlim()[0], statistics.fmean(self.surprise_auroc()), " label-free surprise", fontsize=7)
            ax.set_title(metric)
            ax.set_xlabel("labeled solutions")
            ax.grid(alpha=0.3)
        axes[0][0].legend(fontsize=7)
        figure.tight_layout()
        figure.savefig(path, dpi=100)
        plt.close(figure)


def _result_json(result: CampaignResult) -> dict[str, Any]:
    return {
        "config": asdict(result.config),
        "zero_shot_auroc": result.zero_shot_auroc,
        "generations": [asdict(g) for g in result.generations],
    }


def _config_from_json(fields: dict[str, Any]) -> CampaignConfig:
    tuples = ("best_of_n_sizes", "step_features")
    values: dict[str, Any] = {k: tuple(v) if k in tuples and v is not None else v for k, v in fields.items()}
    values["domain"] = DomainConfig(**fields["domain"])
    return CampaignConfig(**values)


def _generation_from_json(fields: dict[str, Any]) -> GenerationMetrics:
    best_of_n = {int(n): table for n, table in fields["best_of_n"].items()}
    return GenerationMetrics(**{**fields, "best_of_n": best_of_n})


def _run_arms(
    seed: int, arms: Sequence[str], work_dir: Path, config: dict[str, Any], verbose: bool, threads: int | None
) -> dict[str, CampaignResult]:
    """Every arm of one seed (in a worker process: one torch thread)."""
    if threads:
        import torch

        torch.set_num_threads(threads)
    say = (lambda message: print(message, flush=True)) if verbose else None
    results: dict[str, CampaignResult] = {}
    for arm in arms:
        results[arm] = run_campaign_config(
            arm_named(arm), CampaignConfig(seed=seed, **config), work_dir=work_dir, progress=say
        )
        # Each arm's result as soon as it exists: a study cut short still has its arms.
        (work_dir / f"{arm}.json").write_text(json.dumps(_result_json(results[arm]), default=str))
    return results


def run_study(
    seeds: Sequence[int] = DEFAULT_SEEDS,
    arms: Sequence[str] = STUDY_ARMS,
    *,
    work_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
    workers: int = 1,
    **config: Any,
) -> Study:
    """The arms on the same seeds; ``config`` holds ``CampaignConfig`` fields (defaults:
    ``STUDY_DEFAULTS``). With ``workers`` > 1, seeds run in that many processes of one
    torch thread each."""
    for arm in arms:
        arm_named(arm)
    if "uniform" not in arms:
        raise ValueError("the study compares every arm with 'uniform'; include it")
    settings = {**STUDY_DEFAULTS, **config}
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="study-")) if work_dir is None else Path(work_dir)
    if settings.get("step_features") == () and settings.get("feature_cache") is None:
        settings["feature_cache"] = str(root / "features")
    try:
        probe = CampaignConfig(**settings)
        cached = _cached(probe)
        resolve_backbone(probe, progress)  # pretrain once, before any worker
        pretrain_seconds = None if cached else time.monotonic() - started
        per_seed: list[dict[str, CampaignResult]]
        if workers > 1 and len(seeds) > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            # spawn, not fork: a forked copy of a process that has run torch can deadlock.
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=min(workers, len(seeds)), mp_context=context) as pool:
                futures = [
                    pool.submit(_run_arms, seed, arms, root / f"seed-{seed}", settings, progress is not None, 1)
                    for seed in seeds
                ]
                per_seed = [future.result() for future in futures]
        else:
            per_seed = [
                _run_arms(seed, arms, root / f"seed-{seed}", settings, progress is not None, None) for seed in seeds
            ]
    finally:
        if work_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    return Study(
        {arm: tuple(runs[arm] for runs in per_seed) for arm in arms},
        wall_seconds=time.monotonic() - started,
        pretrain_seconds=pretrain_seconds,
    )


def _cached(config: CampaignConfig) -> bool:
    if not config.backbone.startswith("sim:"):
        return True
    root = Path(config.backbone_cache) if config.backbone_cache else default_cache_root()
    return (root / pretrain_config(config).fingerprint() / PRETRAIN_FILE).is_file()


# -------------------------------------------------------------------------------- sweep


@dataclass(frozen=True)
class Sweep:
    studies: dict[float, Study]  # systematic share -> uniform against the main convincing arm
    wall_seconds: float | None = None

    def to_markdown(self) -> str:
        first = next(iter(self.studies.values()))
        config = first.config
        best = efficiency_metrics(config)[0]
        lines = [
            f"`{MAIN_CONVINCING}` against `uniform` as the generator's errors go from random corruptions "
            "(share 0, the random-error domain) to misconceptions (share 1"
            + (
                ""
                if config.domain.held_misconceptions is None
                else f": {', '.join(f'`{name}`' for name in config.domain.held_misconceptions)}"
            )
            + f"). At every share the backbone (`{config.backbone}`'s size and schedule) is pretrained on that "
            "generator's own samples. The PRM head reads "
            + ("the hidden state only" if config.step_features == () else "the LM's surprise beside the hidden state")
            + f"; {config.train_problems} pool problems x {config.solutions_per_problem} fresh per generation, "
            f"{config.eval_problems} held-out problems x {config.eval_solutions_per_problem}. "
            f"{config.generations} generations x {config.labels_per_generation} solutions, seeds {first.seeds}."
            + (f" Wall time {self.wall_seconds / 60:.1f} min." if self.wall_seconds is not None else ""),
            "",
            "| systematic share | solutions with a wrong answer | erroneous solutions whose first error is a "
            f"misconception | label-free surprise step AUROC | majority vote | uniform `{best}` at the end | factor "
            f"`{best}` [95% interval] | uniform `first_error_f1` at the end | factor `first_error_f1` [95% interval] |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for share, study in self.studies.items():
            cells = []
            for metric in efficiency_metrics(study.config):
                found = study.efficiency(MAIN_CONVINCING, metric)
                final = [metric_value(r.generations[-1], metric) for r in study.results["uniform"]]
                cells += [_cell(final), f"{_factor(found.factor)} [{found.interval_text()}]"]
            surprise = study.surprise_auroc()
            wrong, systematic = generator_error_shares(study.config.domain)
            n = max(study.config.best_of_n_sizes)
            majority = [r.generations[-1].best_of_n[n]["majority"] for r in study.results["uniform"]]
            lines.append(
                f"| {share:g} | {wrong:.2f} | {systematic:.2f} | {_cell(surprise) if surprise else 'n/a'} | "
                f"{_cell(majority)} | " + " | ".join(cells) + " |"
            )
        return "\n".join(lines) + "\n"

    def write_report(self, out_dir: Path) -> dict[str, Path]:
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = {"markdown": out_dir / "sweep.md", "png": out_dir / "sweep.png", "json": out_dir / "sweep.json"}
        paths["markdown"].write_text(self.to_markdown())
        self.write_png(paths["png"])
        paths["json"].write_text(
            json.dumps({str(share): study.to_json() for share, study in self.studies.items()}, default=str)
        )
        return paths

    def write_png(self, path: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, axes = plt.subplots(1, 2, figsize=(10, 3.8), squeeze=False)
        shares = list(self.studies)
        metrics = efficiency_metrics(next(iter(self.studies.values())).config)
        for ax, metric in zip(axes[0], metrics, strict=True):
            found = [self.studies[share].efficiency(MAIN_CONVINCING, metric) for share in shares]
            for share, item in zip(shares, found, strict=True):
                if item.factor is None:
                    continue
                low, high = item.interval if item.interval is not None else (item.factor, item.factor)
                ax.errorbar(
                    [share], [item.factor], yerr=[[item.factor - low], [high - item.factor]], fmt="o", color="#d6604d"
                )
            defined = [(s, f.factor) for s, f in zip(shares, found, strict=True) if f.factor is not None]
            if defined:
                ax.plot(*zip(*defined, strict=True), color="#d6604d")
            ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
            ax.axhline(2.0, color="grey", linestyle=":", linewidth=1)
            # Every share on the axis, also those where the factor is undefined.
            ax.set_xlim(min(shares) - 0.05, max(shares) + 0.05)
            ax.set_xlabel("systematic share of the generator's errors")
            ax.set_ylabel("data efficiency, convincing / uniform")
            ax.set_title(metric)
            ax.grid(alpha=0.3)
        figure.tight_layout()
        figure.savefig(path, dpi=100)
        plt.close(figure)


def generator_error_shares(domain: DomainConfig, problems: int = 200, seed: int = 0) -> tuple[float, float]:
    """Of a sample's solutions, the share with a wrong answer; of its erroneous ones, the
    share whose first error is a misconception."""
    from activelearn.simulation.domain import build_dataset

    solutions = build_dataset(problems, 8, seed, domain, prefix="train").all_solutions()
    erroneous = [s for s in solutions if s.first_error is not None]
    systematic = [s for s in erroneous if s.steps[s.first_error or 0].error == "misconception"]
    wrong = sum(not s.final_correct for s in solutions) / max(1, len(solutions))
    return wrong, len(systematic) / max(1, len(erroneous))


def run_sweep(
    shares: Sequence[float],
    seeds: Sequence[int] = DEFAULT_SEEDS,
    *,
    progress: Callable[[str], None] | None = None,
    workers: int = 1,
    **config: Any,
) -> Sweep:
    started = time.monotonic()
    settings = {**SWEEP_DEFAULTS, **config}
    domain: DomainConfig = settings.pop("domain")
    studies: dict[float, Study] = {}
    for share in shares:
        if progress is not None:
            progress(f"systematic share {share:g}")
        studies[share] = run_study(
            seeds,
            SWEEP_ARMS,
            progress=progress,
            workers=workers,
            domain=replace(domain, systematic_share=share),
            **{**settings, "pretrain_on_domain": True},
        )
    return Sweep(dict(sorted(studies.items())), wall_seconds=time.monotonic() - started)


# ---------------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default: 0-9")
    parser.add_argument("--arms", nargs="+", default=list(STUDY_ARMS), choices=list(ARMS))
    parser.add_argument(
        "--sweep", type=float, nargs="+", default=None, help="systematic shares to sweep (uniform vs convincing only)"
    )
    # Left out: the study's defaults (STUDY_DEFAULTS), or the sweep's (SWEEP_DEFAULTS).
    parser.add_argument("--generations", type=int)
    parser.add_argument("--labels-per-generation", type=int)
    parser.add_argument("--backbone")
    parser.add_argument("--backbone-cache")
    parser.add_argument("--train-problems", type=int)
    parser.add_argument("--solutions-per-problem", type=int)
    parser.add_argument("--eval-problems", type=int)
    parser.add_argument("--rollouts", type=int)
    parser.add_argument("--epochs", type=int, dest="num_epochs")
    parser.add_argument("--learning-rate", type=float)
    parser.add_argument(
        "--head-reads",
        choices=["hidden", "hidden+surprise"],
        default=None,
        help="what the PRM head reads (default: hidden for a study, hidden+surprise for a sweep)",
    )
    parser.add_argument(
        "--domain",
        choices=list(DOMAINS),
        default=None,
        help=f"the generator, and the backbone pretrained on its samples (default {DEFAULT_DOMAIN})",
    )
    parser.add_argument("--systematic-share", type=float, help="the study's domain (default 1)")
    parser.add_argument(
        "--held-misconceptions", nargs="+", default=None, metavar="NAME", help="the misconceptions the generator holds"
    )
    parser.add_argument("--workers", type=int, default=2, help="seeds in parallel, one torch thread each")
    parser.add_argument("--out", type=Path, default=None, help="default var/simulation/study or .../sweep")
    parser.add_argument(
        "--merge", type=Path, nargs="+", default=None, help="study.json files of single-seed runs: report them as one"
    )
    parser.add_argument("--work-dir", type=Path, default=None, help="keep models and each arm's result here")
    parser.add_argument(
        "--from-work-dir", type=Path, default=None, help="report the arms every seed under this --work-dir finished"
    )
    args = parser.parse_args(argv)
    started = time.monotonic()

    def say(message: str) -> None:
        print(f"[{time.monotonic() - started:6.0f}s] {message}", flush=True)

    names = (
        "generations",
        "labels_per_generation",
        "backbone",
        "backbone_cache",
        "train_problems",
        "solutions_per_problem",
        "eval_problems",
        "rollouts",
        "num_epochs",
        "learning_rate",
    )
    config: dict[str, Any] = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    if args.head_reads is not None:
        config["step_features"] = () if args.head_reads == "hidden" else None
    if args.domain is not None:
        config["domain"] = DOMAINS[args.domain].config
        config.setdefault("backbone", DOMAINS[args.domain].backbone)
    if args.systematic_share is not None:
        chosen = config.get("domain", STUDY_DEFAULTS["domain"])
        config["domain"] = replace(chosen, systematic_share=args.systematic_share)
    if args.held_misconceptions is not None:
        chosen = config.get("domain", STUDY_DEFAULTS["domain"])
        try:
            config["domain"] = replace(chosen, held_misconceptions=tuple(args.held_misconceptions))
        except ValueError as error:
            parser.error(str(error))
    report: Study | Sweep
    if args.from_work_dir is not None:
        report = Study.from_work_dir(args.from_work_dir)
        out = args.out or Path("var/simulation/study")
    elif args.merge is not None:
        report = Study.merged([Study.from_json(json.loads(path.read_text())) for path in args.merge])
        out = args.out or Path("var/simulation/study")
    elif args.sweep is not None:
        seeds = args.seeds or list(DEFAULT_SEEDS)
        report = run_sweep(args.sweep, seeds, progress=say, workers=args.workers, **config)
        out = args.out or Path("var/simulation/sweep")
    else:
        report = run_study(
            args.seeds or list(DEFAULT_SEEDS),
            args.arms,
            progress=say,
            workers=args.workers,
            work_dir=args.work_dir,
            **config,
        )
        out = args.out or Path("var/simulation/study")
    paths = report.write_report(out)
    print(report.to_markdown())
    print("wrote", ", ".join(str(p) for p in paths.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
