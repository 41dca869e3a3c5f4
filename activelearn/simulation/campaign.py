"""Simulated labeling campaigns: does convincing wrong-answer selection beat uniform?

Each generation: train a PRM on every label so far (the real ``train_prm``), score the
unlabeled pool with it (the real ``score_solutions``), pick ``labels_per_generation``
solutions with the strategy, have the oracle label them, and evaluate the PRM on held-out
problems. Generation 0 is a uniform seed set, identical for every strategy with the same
seed, so strategies are compared on paired runs.

The default backbone, ``sim:digits`` (activelearn.simulation.backbone), is LM-pretrained on
unlabeled domain text and cached, so it can learn to check the domain's arithmetic; each
generation fine-tunes it from scratch on all labels so far. By default every generation
draws a fresh pool of solutions to the same problems, as PRM800K sampled new solutions
per generation; ``pool="fixed"`` keeps one pool and only removes what was labeled.

``compare_strategies`` runs both strategies on the same seeds; its statistics are in
``stats``, its report in ``report``, and ``cli`` runs it from a shell::

    python -m activelearn.simulation.cli --out var/simulation/default

Nothing here imports Django.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from activelearn.selection.rules import PoolCandidate, Selected, select_convincing, select_uniform
from activelearn.simulation.arms import Arm
from activelearn.simulation.backbone import (
    DEFAULT_SIM_BACKBONE,
    SIM_BACKBONE_PREFIX,
    SIM_BACKBONES,
    PretrainConfig,
    pretrained_backbone,
)
from activelearn.simulation.domain import (
    Dataset,
    DomainConfig,
    GeneratedSolution,
    Problem,
    build_dataset,
    generate_problems,
    problem_texts,
    sample_solutions,
)
from activelearn.simulation.oracle import OracleLabeler
from activelearn.simulation.shepherd import label_solutions
from activelearn.simulation.stats import (
    BOOTSTRAP_RESAMPLES,
    Efficiency,
    bootstrap_efficiency,
    data_efficiency,
    mean_curve,
)

Strategy = Literal["convincing", "uniform"]
STRATEGIES: tuple[Strategy, ...] = ("convincing", "uniform")
PoolMode = Literal["fresh", "fixed"]
# How a budget is counted: labeled solutions (what a generation buys) or the step ratings
# they cost (a phase-2 labeler stops at the first wrong step, so wrong answers are cheaper).
Unit = Literal["solutions", "step_labels"]
UNITS: tuple[Unit, ...] = ("solutions", "step_labels")
PRIMARY_METRIC = "first_error_f1"


@dataclass(frozen=True)
class CampaignConfig:
    # Few labels per generation: the PRM reads a pretrained LM's surprise, so by about 100
    # labeled solutions either strategy's PRM is near its ceiling (step AUROC 0.99) and a
    # comparison shows nothing; the default budget stays where the curves still climb.
    generations: int = 6
    labels_per_generation: int = 10  # solutions sent to the oracle per generation
    seed: int = 0
    backbone: str = DEFAULT_SIM_BACKBONE
    # Where ``sim:`` backbones are cached; None: $ANNOTATE_VAR_DIR/simulation/backbones.
    backbone_cache: str | None = None
    train_problems: int = 200
    solutions_per_problem: int = 8  # pool solutions per problem, per generation when fresh
    pool: PoolMode = "fresh"
    eval_problems: int = 60
    eval_solutions_per_problem: int = 16
    k_per_problem: int | None = 2  # cap per problem for convincing selection; None: global top-K only
    wrong_share: float = 0.8
    noise_rate: float = 0.0
    neutral_fillers: bool = True
    domain: DomainConfig = field(default_factory=DomainConfig)
    learning_rate: float | None = None  # None: the backbone family's (see resolved_learning_rate)
    num_epochs: int = 6
    batch_size: int = 8
    max_length: int = 256
    # Lower transformer layers (and embeddings) kept as pretrained, and what the head reads
    # beside the hidden state; None: the backbone family's recipe (for sim: backbones the
    # whole LM frozen and its surprise at each step, activelearn.prm.recipes).
    freeze_layers: int | None = None
    step_features: tuple[str, ...] | None = None
    best_of_n_sizes: tuple[int, ...] = (4, 16)
    threshold: float = 0.5
    score_batch_size: int = 64
    # Pretrain the sim: backbone on the campaign's own generator (its ``domain``) instead
    # of the named backbone's corpus: the generator's errors are then in the LM at the
    # rate it makes them, as a real generator's are in its own weights.
    pretrain_on_domain: bool = False
    rollouts: int = 8  # Math-Shepherd completions per step (the shepherd arms)
    # Directory of the product's frozen-feature cache (activelearn.prm.feature_cache):
    # a head that reads only the hidden state (step_features=()) then pays the backbone's
    # forward pass once per text, however many arms and generations score it.
    feature_cache: str | None = None

    def resolved_learning_rate(self) -> float:
        from activelearn.prm.recipes import SIMULATED_LEARNING_RATE

        if self.learning_rate is not None:
            return self.learning_rate
        if self.backbone.startswith(SIM_BACKBONE_PREFIX):
            return SIMULATED_LEARNING_RATE
        return 3e-3 if self.backbone.startswith("tiny:") else 5e-5


def resolve_backbone(config: CampaignConfig, progress: Callable[[str], None] | None = None) -> str:
    """What ``train_prm`` gets: a ``sim:`` spec becomes its cached pretrained directory
    (pretrained here, once, when the cache lacks it); any other spec is passed through."""
    if not config.backbone.startswith(SIM_BACKBONE_PREFIX):
        return config.backbone
    name = config.backbone.removeprefix(SIM_BACKBONE_PREFIX)
    if name not in SIM_BACKBONES:
        raise ValueError(f"unknown simulated backbone {config.backbone!r}; known: {sorted(SIM_BACKBONES)}")
    cache = Path(config.backbone_cache) if config.backbone_cache else None
    found = pretrained_backbone(pretrain_config(config), cache, progress=progress)
    if found.trained and progress is not None:
        progress(f"pretrained {config.backbone} in {found.seconds:.0f}s into {found.directory}")
    return str(found.directory)


def pretrain_config(config: CampaignConfig) -> PretrainConfig:
    """The named sim: backbone's pretraining, on the campaign's domain when asked."""
    named = SIM_BACKBONES[config.backbone.removeprefix(SIM_BACKBONE_PREFIX)]
    return replace(named, domain=config.domain) if config.pretrain_on_domain else named


@dataclass(frozen=True)
class GenerationMetrics:
    generation: int
    labeled_solutions: int  # cumulative
    step_labels: int  # cumulative ratings handed out
    selected_wrong_answer_share: float  # of this generation's picks, graded wrong
    selected_error_free_share: float  # of this generation's picks, no wrong step at all
    # Of this generation's picks that have a wrong step, the share whose first error is
    # subtle (off by 1, 2 or 10; one digit changed): what a PRM misses, and selection seeks.
    selected_subtle_share: float
    first_error_f1: float
    first_error_error_accuracy: float
    first_error_correct_accuracy: float
    # Held-out first-error localisation, split by the first error's subtlety.
    error_accuracy_subtle: float
    error_accuracy_obvious: float
    step_auroc: float
    best_of_n: dict[int, dict[str, float]]  # n -> prm / majority / weighted accuracy
    train_seconds: float
    trained_on: int = 0  # solutions the model was trained on (orm-pool: the graded pool)


@dataclass(frozen=True)
class CampaignResult:
    strategy: str  # a Strategy, or an arm's name (activelearn.simulation.arms)
    config: CampaignConfig
    generations: tuple[GenerationMetrics, ...]
    # The baseline every PRM here has to beat: held-out step AUROC of the frozen backbone's
    # summed surprise at each step, with no label at all (None: the backbone has no LM head).
    zero_shot_auroc: float | None = None

    def curve(self, metric: str = PRIMARY_METRIC, unit: Unit = "solutions") -> list[tuple[float, float]]:
        return [(budget(g, unit), metric_value(g, metric)) for g in self.generations]


def budget(metrics: GenerationMetrics, unit: Unit) -> float:
    return float(metrics.labeled_solutions if unit == "solutions" else metrics.step_labels)


def metric_value(metrics: GenerationMetrics, metric: str) -> float:
    """A named metric; ``bon_prm@16`` / ``bon_majority@16`` read the best-of-N table."""
    if metric.startswith("bon_"):
        kind, n = metric[4:].split("@")
        return metrics.best_of_n[int(n)][kind]
    value = getattr(metrics, metric)
    assert isinstance(value, float)
    return value


# ------------------------------------------------------------------------- the loop


def _train_and_load(
    labeled: Sequence[Any], output_dir: Path, config: CampaignConfig, backbone: str, *, outcome: bool = False
) -> tuple[Any, Any, float]:
    import torch

    from activelearn.prm import ProcessRewardModel, TrainConfig, train_prm

    started = time.monotonic()
    final = output_dir / "final"
    if not (final / "prm_config.json").is_file():  # generation 0 is shared between strategies
        train_prm(
            labeled,
            TrainConfig(
                output_dir=output_dir,
                backbone=backbone,
                learning_rate=config.resolved_learning_rate(),
                num_epochs=config.num_epochs,
                batch_size=config.batch_size,
                max_length=config.max_length,
                freeze_layers=config.freeze_layers,
                step_features=config.step_features,
                # A plain loss, whatever the backbone family's default: the published
                # campaign table was measured that way.
                class_weighting="none",
                checkpoint_every=0,
                seed=config.seed,
                # An ORM (the product's, activelearn.prm): one label per solution, at its
                # last step, from the grader.
                objective="outcome" if outcome else "process",
            ),
            validation=[],
        )
    model, tokenizer = ProcessRewardModel.from_pretrained(final)
    if torch.cuda.is_available():
        model = model.to("cuda")
    model.eval()
    return model, tokenizer, time.monotonic() - started


def _score(
    model: Any,
    tokenizer: Any,
    problems: dict[str, str],
    solutions: Sequence[GeneratedSolution],
    batch: int,
    reduction: str = "product",
) -> Any:
    from activelearn.prm import score_solutions

    return score_solutions(
        model,
        tokenizer,
        [(problems[s.problem_id], s.step_texts) for s in solutions],
        batch_size=batch,
        reduction=reduction,  # type: ignore[arg-type]
    )


@dataclass(frozen=True)
class _Evaluation:
    f1: float
    error_accuracy: float
    correct_accuracy: float
    error_accuracy_subtle: float
    error_accuracy_obvious: float
    step_auroc: float
    best_of_n: dict[int, dict[str, float]]


def _evaluate(
    model: Any, tokenizer: Any, held_out: Dataset, config: CampaignConfig, reduction: str = "product"
) -> _Evaluation:
    from activelearn.prm.evaluation import Candidate, auroc, best_of_n, first_error_metrics, predicted_first_error

    solutions = held_out.all_solutions()
    scores = _score(model, tokenizer, problem_texts(held_out.problems), solutions, config.score_batch_size, reduction)
    first_error = first_error_metrics(
        [s.step_scores for s in scores], [g.first_error for g in solutions], config.threshold
    )
    hits: dict[bool, list[bool]] = {True: [], False: []}
    for generated, scored in zip(solutions, scores, strict=True):
        if generated.first_error is not None:
            found = predicted_first_error(scored.step_scores, config.threshold) == generated.first_error
            hits[bool(generated.subtle)].append(found)
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
            Candidate(
                score=scored.score,
                answer=generated.answer,
                is_correct=generated.final_correct,
                step_scores=scored.step_scores,
            )
        )
    table: dict[int, dict[str, float]] = {}
    for n in config.best_of_n_sizes:
        result = best_of_n(list(by_problem.values()), n, trials=10, seed=config.seed)
        table[n] = {
            "prm": result.prm_accuracy,
            "majority": result.majority_accuracy,
            "weighted": result.weighted_accuracy,
            # The lowest step score instead of their product: the product favours short
            # solutions, and a skipped sub-step makes a wrong solution shorter.
            "prm_min": result.by_aggregation.get("min", result.prm_accuracy),
            "random": result.random_accuracy,
        }
    return _Evaluation(
        f1=first_error.f1,
        error_accuracy=first_error.error_accuracy,
        correct_accuracy=first_error.correct_accuracy,
        error_accuracy_subtle=statistics.fmean(hits[True]) if hits[True] else 0.0,
        error_accuracy_obvious=statistics.fmean(hits[False]) if hits[False] else 0.0,
        step_auroc=auroc(step_scores, truths),
        best_of_n=table,
    )


def zero_shot_surprise_auroc(backbone: str, held_out: Dataset, config: CampaignConfig) -> float | None:
    """Step AUROC on the held-out steps a phase-2 labeler would rate, ranking each step by
    the frozen LM's summed surprise at its tokens (``STEP_FEATURES["surprise"]``)."""
    from activelearn.prm.head_training import surprise_step_auroc

    texts = problem_texts(held_out.problems)
    truth = OracleLabeler(neutral_fillers=config.neutral_fillers)
    solutions = [truth.label(texts[s.problem_id], s) for s in held_out.all_solutions()]
    return surprise_step_auroc(backbone, solutions, max_length=config.max_length)


def _shared_zero_shot(path: Path, backbone: str, held_out: Dataset, config: CampaignConfig) -> float | None:
    """The seed's zero-shot baseline, computed by the first strategy of a seed and read by
    the second (it depends on the backbone and the held-out set only, like generation 0)."""
    if path.is_file():
        value: float | None = json.loads(path.read_text())["zero_shot_auroc"]
        return value
    value = zero_shot_surprise_auroc(backbone, held_out, config)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"zero_shot_auroc": value}))
    return value


def pool_solutions(problems: Sequence[Problem], config: CampaignConfig, generation: int) -> list[GeneratedSolution]:
    """The pool a generation selects from: the same problems, and with ``pool="fresh"`` a
    new draw of solutions for every generation after the first (ids differ per draw)."""
    draw = f"g{generation}" if config.pool == "fresh" and generation > 0 else ""
    return [
        solution
        for problem in problems
        for solution in sample_solutions(problem, config.solutions_per_problem, config.seed, config.domain, draw)
    ]


def run_campaign(
    strategy: Strategy,
    generations: int = CampaignConfig.generations,
    labels_per_generation: int = CampaignConfig.labels_per_generation,
    seed: int = 0,
    backbone: str = DEFAULT_SIM_BACKBONE,
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


def strategy_arm(strategy: Strategy, config: CampaignConfig) -> Arm:
    """The arm a two-strategy campaign runs: convincing selection as configured, or uniform."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if strategy == "uniform":
        return Arm("uniform")
    return Arm("convincing", "convincing", config.wrong_share, per_problem=config.k_per_problem is not None)


def run_campaign_config(
    strategy: Strategy | Arm,
    config: CampaignConfig,
    *,
    work_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> CampaignResult:
    arm = strategy if isinstance(strategy, Arm) else strategy_arm(strategy, config)
    if config.pool not in ("fresh", "fixed"):
        raise ValueError(f"pool must be 'fresh' or 'fixed', got {config.pool!r}")
    say = progress or (lambda message: None)
    owned = work_dir is None
    root = Path(tempfile.mkdtemp(prefix="campaign-")) if work_dir is None else Path(work_dir)
    if config.feature_cache is not None:
        from activelearn.prm import feature_cache

        feature_cache.configure(config.feature_cache)
    try:
        backbone = resolve_backbone(config, say)
        problems = generate_problems(config.train_problems, config.seed, config.domain, prefix="train")
        problems_by_id = {problem.problem_id: problem for problem in problems}
        held_out = build_dataset(
            config.eval_problems, config.eval_solutions_per_problem, config.seed, config.domain, prefix="eval"
        )
        texts = problem_texts(problems)
        pool = pool_solutions(problems, config, 0)
        drawn: list[GeneratedSolution] = list(pool)  # every pool solution so far (orm-pool)
        oracle = OracleLabeler(noise_rate=config.noise_rate, neutral_fillers=config.neutral_fillers, seed=config.seed)
        labeled: list[Any] = []
        labeled_ids: set[str] = set()
        solutions_labeled = 0
        human_step_labels = 0
        scores: dict[str, float] = {}
        history: list[GenerationMetrics] = []
        reduction = "last" if arm.is_orm else "product"
        for generation in range(config.generations):
            by_id = {s.solution_id: s for s in pool}
            candidates = [
                PoolCandidate(s.problem_id, s.solution_id, scores.get(s.solution_id, 0.0), s.final_correct)
                for s in pool
            ]
            picks: list[Selected]
            if generation == 0 or arm.selection == "uniform":
                picks = select_uniform(
                    candidates, config.labels_per_generation, labeled_ids, seed=config.seed * 1000 + generation
                )
            else:
                picks = select_convincing(
                    candidates,
                    k_per_problem=config.k_per_problem if arm.per_problem else None,
                    k_total=config.labels_per_generation,
                    wrong_share=arm.wrong_share,
                    exclude=labeled_ids,
                    seed=config.seed * 1000 + generation,
                )
            chosen = [by_id[str(pick.solution_id)] for pick in picks]
            labeled_ids.update(solution.solution_id for solution in chosen)
            solutions_labeled += len(chosen)
            training: list[Any]
            if arm.labels == "oracle":
                before = oracle.step_labels
                labeled.extend(oracle.label(texts[solution.problem_id], solution) for solution in chosen)
                human_step_labels += oracle.step_labels - before
                training = labeled
            elif arm.labels == "outcome":
                labeled.extend(_graded(texts, chosen))
                training = labeled
            elif arm.labels == "outcome_pool":
                training = _graded(texts, drawn)
            else:
                labeled.extend(
                    label_solutions(
                        problems_by_id,
                        texts,
                        chosen,
                        config.rollouts,
                        config.domain,
                        soft=arm.labels == "shepherd_soft",
                        seed=config.seed,
                    )
                )
                training = labeled

            # Generation 0 is the same uniform sample for every arm: arms with the same
            # label source share its model (the two-strategy campaign's shared start).
            gen_dir = root / (
                f"seed-{config.seed}-gen-0" + ("" if arm.labels == "oracle" else f"-{arm.labels}")
                if generation == 0
                else f"{arm.name}-gen-{generation}"
            )
            model, tokenizer, seconds = _train_and_load(training, gen_dir, config, backbone, outcome=arm.is_orm)
            evaluation = _evaluate(model, tokenizer, held_out, config, reduction)
            erroneous = [s for s in chosen if s.first_error is not None]
            metrics = GenerationMetrics(
                generation=generation,
                labeled_solutions=solutions_labeled,
                step_labels=human_step_labels,
                selected_wrong_answer_share=sum(not s.final_correct for s in chosen) / max(1, len(chosen)),
                selected_error_free_share=sum(s.first_error is None for s in chosen) / max(1, len(chosen)),
                selected_subtle_share=sum(bool(s.subtle) for s in erroneous) / max(1, len(erroneous)),
                first_error_f1=evaluation.f1,
                first_error_error_accuracy=evaluation.error_accuracy,
                first_error_correct_accuracy=evaluation.correct_accuracy,
                error_accuracy_subtle=evaluation.error_accuracy_subtle,
                error_accuracy_obvious=evaluation.error_accuracy_obvious,
                step_auroc=evaluation.step_auroc,
                best_of_n=evaluation.best_of_n,
                train_seconds=seconds,
                trained_on=len(drawn) if arm.labels == "outcome_pool" else solutions_labeled,
            )
            history.append(metrics)
            n = max(config.best_of_n_sizes)
            say(
                f"{arm.name} seed={config.seed} gen={generation} labels={metrics.labeled_solutions} "
                f"steps={metrics.step_labels} f1={evaluation.f1:.3f} auroc={evaluation.step_auroc:.3f} "
                f"bon@{n}={evaluation.best_of_n[n]['prm']:.3f}/maj {evaluation.best_of_n[n]['majority']:.3f} "
                f"picked_wrong={metrics.selected_wrong_answer_share:.2f} ({seconds:.0f}s)"
            )
            if generation + 1 < config.generations:
                if config.pool == "fresh":
                    pool = pool_solutions(problems, config, generation + 1)
                    drawn.extend(pool)
                if arm.selection == "convincing":
                    unlabeled = [s for s in pool if s.solution_id not in labeled_ids]
                    scored = _score(model, tokenizer, texts, unlabeled, config.score_batch_size, reduction)
                    scores = {s.solution_id: r.score for s, r in zip(unlabeled, scored, strict=True)}
            if generation > 0:  # generation 0's model is shared between the arms and stays
                shutil.rmtree(gen_dir, ignore_errors=True)
        return CampaignResult(
            strategy=arm.name,
            config=config,
            generations=tuple(history),
            zero_shot_auroc=_shared_zero_shot(root / f"seed-{config.seed}-zero-shot.json", backbone, held_out, config),
        )
    finally:
        if owned:
            shutil.rmtree(root, ignore_errors=True)


def _graded(texts: dict[str, str], solutions: Sequence[GeneratedSolution]) -> list[Any]:
    """Outcome labels: each solution's final answer as the automatic grader judges it."""
    from activelearn.prm.data import OutcomeSolution

    return [
        OutcomeSolution(s.problem_id, texts[s.problem_id], s.step_texts, correct=s.final_correct) for s in solutions
    ]


@dataclass(frozen=True)
class Comparison:
    results: dict[Strategy, tuple[CampaignResult, ...]]  # one per seed, same seed order
    wall_seconds: float | None = None  # the whole comparison, pretraining included
    pretrain_seconds: float | None = None  # None: the backbone came from the cache (or none needed)

    def curves(self, strategy: Strategy, metric: str, unit: Unit = "solutions") -> list[list[tuple[float, float]]]:
        return [result.curve(metric, unit) for result in self.results[strategy]]

    def mean_curve(
        self, strategy: Strategy, metric: str = PRIMARY_METRIC, unit: Unit = "solutions"
    ) -> list[tuple[float, float]]:
        return mean_curve(self.curves(strategy, metric, unit))

    def efficiency(self, metric: str = PRIMARY_METRIC, unit: Unit = "solutions") -> Efficiency:
        active, uniform = self.curves("convincing", metric, unit), self.curves("uniform", metric, unit)
        interval, undefined = bootstrap_efficiency(active, uniform)
        return Efficiency(
            on_mean_curves=data_efficiency(mean_curve(active), mean_curve(uniform)),
            per_seed=[data_efficiency(a, u) for a, u in zip(active, uniform, strict=True)],
            interval=interval,
            undefined_resamples=undefined,
            resamples=BOOTSTRAP_RESAMPLES,
        )

    def metrics(self) -> list[str]:
        config = self.results["uniform"][0].config
        n = max(config.best_of_n_sizes)
        return [PRIMARY_METRIC, "step_auroc", f"bon_prm@{n}", f"bon_prm_min@{n}", f"bon_majority@{n}"]


def compare_strategies(
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    *,
    work_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
    workers: int = 1,
    **config: Any,
) -> Comparison:
    """Both strategies on the same seeds; ``config`` holds ``CampaignConfig`` fields.

    With ``workers`` > 1, seeds run in that many processes of one torch thread each: the
    models are small enough that one thread per seed uses the cores better than several
    threads on one seed (progress lines then come from the workers' stdout).
    """
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="campaigns-")) if work_dir is None else Path(work_dir)
    pretrain_seconds: float | None = None
    try:
        # Pretrain (or find in the cache) once, before any seed: every run reuses it.
        probe = time.monotonic()
        before = _cached(CampaignConfig(**config))
        resolve_backbone(CampaignConfig(**config), progress)
        if before is False:
            pretrain_seconds = time.monotonic() - probe
        per_seed: list[tuple[CampaignResult, ...]]
        if workers > 1 and len(seeds) > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            # spawn, not fork: a forked copy of a process that has run torch can deadlock.
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=min(workers, len(seeds)), mp_context=context) as pool:
                futures = [
                    pool.submit(_run_seed, seed, root / f"seed-{seed}", config, progress is not None) for seed in seeds
                ]
                per_seed = [future.result() for future in futures]
        else:
            per_seed = [
                tuple(
                    run_campaign_config(
                        strategy, CampaignConfig(seed=seed, **config), work_dir=root / f"seed-{seed}", progress=progress
                    )
                    for strategy in STRATEGIES
                )
                for seed in seeds
            ]
    finally:
        if work_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    return Comparison(
        {strategy: tuple(runs[index] for runs in per_seed) for index, strategy in enumerate(STRATEGIES)},
        wall_seconds=time.monotonic() - started,
        pretrain_seconds=pretrain_seconds,
    )


def _run_seed(seed: int, work_dir: Path, config: dict[str, Any], verbose: bool) -> tuple[CampaignResult, ...]:
    """Both strategies of one seed, in a worker process with one torch thread."""
    import torch

    torch.set_num_threads(1)
    say = (lambda message: print(message, flush=True)) if verbose else None
    return tuple(
        run_campaign_config(strategy, CampaignConfig(seed=seed, **config), work_dir=work_dir, progress=say)
        for strategy in STRATEGIES
    )


def _cached(config: CampaignConfig) -> bool | None:
    """Whether a ``sim:`` backbone is already cached; None for other backbones."""
    from activelearn.prm.recipes import PRETRAIN_FILE
    from activelearn.simulation.backbone import default_cache_root

    name = config.backbone.removeprefix(SIM_BACKBONE_PREFIX)
    if not config.backbone.startswith(SIM_BACKBONE_PREFIX) or name not in SIM_BACKBONES:
        return None
    root = Path(config.backbone_cache) if config.backbone_cache else default_cache_root()
    return (root / SIM_BACKBONES[name].fingerprint() / PRETRAIN_FILE).is_file()
