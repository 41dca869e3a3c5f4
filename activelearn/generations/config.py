"""What one generation does (``GenerationConfig``, stored on its run), the bounds its
values are checked against, and the errors the pipeline refuses a request with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from django.conf import settings

from activelearn.checkpoints.runs import OUTCOME_MIX_KEYS, TRAIN_CONFIG_KEYS

ERROR_MAX = 10_000
# Generation.number and the ids a config names are 32-bit integer columns on PostgreSQL:
# a larger value must be refused as input, not reach the database as a DataError.
INTEGER_MAX = 2**31 - 1
# Solutions one generation may select. PRM800K's generations served tens of thousands;
# a bound keeps a typo (k=10**30) from reading as "the whole pool".
K_MAX = 1_000_000
SCORE_BATCH_MAX = 4096
GRADE_TIMEOUT_MAX_S = 3600.0
SAMPLE_N_MAX = 1000


class PipelineError(ValueError):
    """A request the pipeline refuses; the message says why."""


class GenerationConfigError(PipelineError):
    pass


class GenerationRunningError(PipelineError):
    """Another generation is already running (``generation_at_most_one_running``)."""


class GenerationNumberTakenError(PipelineError):
    pass


class GenerationStateError(PipelineError):
    """The generation is not in a status that allows the operation."""


@dataclass(frozen=True)
class GenerationConfig:
    """What one generation does; stored on ``GenerationRun.config`` as ``to_json()``."""

    # Selection: top K per problem (per_problem) or in total, wrong_share of them
    # convincing wrong-answer (activelearn.selection.rules).
    k: int = 100
    per_problem: bool = False
    wrong_share: float = 0.8
    # The pool: solutions with steps of these problems (Problem.unique_id; None = all),
    # of this split (None = any), at most per_problem_cap per problem (lowest ids first).
    problem_ids: tuple[str, ...] | None = None
    split: str | None = None
    # None: every never-served solution; the default is settings.PIPELINE_POOL_PER_PROBLEM.
    per_problem_cap: int | None = field(default_factory=lambda: settings.PIPELINE_POOL_PER_PROBLEM or None)
    # Sample N solutions per problem from the generator first (SAMPLING_* settings), and
    # make the pool those; 0 = off, the pool is the solutions already stored.
    sample_n: int = 0
    # Gold QC items added to the generation's QC pool (labeling.quality.gold); 0 = none.
    qc_items: int = 0
    # Share of new tasks labeled twice (labeling.quality.control.overlap_labelers_needed);
    # None = settings.OVERLAP_SHARE.
    overlap_share: float | None = None
    # Training: neutral labels as their own class or folded; scoring: neutral counted as.
    neutral: str = "own"
    neutral_as: str = "positive"
    # Step scores to a solution score; "" = the checkpoint's aggregation, chosen on its
    # validation solutions (activelearn.prm.calibration), "min" for one without.
    reduction: str = ""
    # Retrain on all labels so far first; otherwise score with checkpoint_id or the
    # latest READY checkpoint.
    retrain: bool = True
    checkpoint_id: int | None = None
    base_model: str = ""  # "" = settings.PRM_BACKBONE, resolved at start
    through_generation: int | None = None  # labels trained on; None = every generation
    training: Mapping[str, Any] = field(default_factory=dict)  # TrainConfig overrides
    score_batch_size: int = 16
    grade_timeout_s: float = 5.0

    @classmethod
    def from_json(cls, values: Mapping[str, Any]) -> GenerationConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise GenerationConfigError(f"unknown generation option(s): {', '.join(sorted(unknown))}")
        data = dict(values)
        if data.get("problem_ids") is not None:
            if isinstance(data["problem_ids"], str) or not all(isinstance(p, str) for p in data["problem_ids"]):
                raise GenerationConfigError("problem_ids must be a list of Problem.unique_id strings")
            data["problem_ids"] = tuple(data["problem_ids"])
        config = cls(**data)
        config.check()
        return config

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["problem_ids"] = None if self.problem_ids is None else list(self.problem_ids)
        data["training"] = dict(self.training)
        return data

    def check(self) -> None:
        def need(ok: bool, message: str) -> None:
            if not ok:
                raise GenerationConfigError(message)

        def integer(value: Any) -> bool:
            return isinstance(value, int) and not isinstance(value, bool)

        need(integer(self.k) and 1 <= self.k <= K_MAX, f"k must be an integer in [1, {K_MAX:,}]")
        need(isinstance(self.per_problem, bool), "per_problem must be true or false")
        need(
            isinstance(self.wrong_share, int | float) and 0.0 <= self.wrong_share <= 1.0,
            "wrong_share must lie in [0, 1]",
        )
        need(
            self.split is None or self.split in {"train", "validation", "test", ""},
            "split must be train, validation, test or empty",
        )
        need(
            self.per_problem_cap is None
            or (integer(self.per_problem_cap) and 1 <= self.per_problem_cap <= INTEGER_MAX),
            f"per_problem_cap must be an integer in [1, {INTEGER_MAX}]",
        )
        need(integer(self.sample_n) and 0 <= self.sample_n <= SAMPLE_N_MAX, f"sample_n must lie in [0, {SAMPLE_N_MAX}]")
        need(
            integer(self.qc_items) and 0 <= self.qc_items <= settings.QC_ITEMS_MAX,
            f"qc_items must lie in [0, QC_ITEMS_MAX={settings.QC_ITEMS_MAX}]",
        )
        need(
            self.overlap_share is None
            or (isinstance(self.overlap_share, int | float) and 0.0 <= self.overlap_share <= 1.0),
            "overlap_share must lie in [0, 1]",
        )
        need(self.neutral in {"own", "positive", "negative"}, "neutral must be own, positive or negative")
        need(self.neutral_as in {"positive", "negative"}, "neutral_as must be positive or negative")
        need(
            self.reduction in {"", "product", "min", "mean", "last"},
            "reduction must be empty (the checkpoint's), product, min, mean or last",
        )
        need(isinstance(self.retrain, bool), "retrain must be true or false")
        need(
            self.checkpoint_id is None or (integer(self.checkpoint_id) and 1 <= self.checkpoint_id <= INTEGER_MAX),
            f"checkpoint_id must be an integer in [1, {INTEGER_MAX}]",
        )
        need(not (self.retrain and self.checkpoint_id is not None), "checkpoint_id is only used with retrain off")
        need(isinstance(self.base_model, str), "base_model must be a string")
        need(
            self.through_generation is None
            or (integer(self.through_generation) and -1 <= self.through_generation <= INTEGER_MAX),
            f"through_generation must be an integer in [-1, {INTEGER_MAX}]",
        )
        need(isinstance(self.training, Mapping), "training must be an object of TrainConfig options")
        unknown = set(self.training) - (TRAIN_CONFIG_KEYS - {"neutral"})
        need(not unknown, f"unknown training option(s): {', '.join(sorted(unknown))} (neutral has its own key)")
        # The pipeline trains on human labels and gives training no graded solutions.
        outcome = sorted(({"objective"} | OUTCOME_MIX_KEYS) & set(self.training))
        need(
            not outcome,
            f"training option(s) {', '.join(outcome)}: a generation trains a PRM on human labels; "
            "train an ORM or add outcome labels with train_prm, then reuse it with retrain off and checkpoint_id",
        )
        need(
            integer(self.score_batch_size) and 1 <= self.score_batch_size <= SCORE_BATCH_MAX,
            f"score_batch_size must be an integer in [1, {SCORE_BATCH_MAX}]",
        )
        need(
            isinstance(self.grade_timeout_s, int | float) and 0 < self.grade_timeout_s <= GRADE_TIMEOUT_MAX_S,
            f"grade_timeout_s must lie in (0, {GRADE_TIMEOUT_MAX_S:.0f}]",
        )
