"""The step-generator protocol, its settings and what it returns."""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from mathtext.splitting import FirstStep, dedupe

# PRM800K-like: the problem, a blank line, then one step per line; the prompt ends in a
# newline so that the model's next line is the next step.
DEFAULT_PROMPT_TEMPLATE = "{problem}\n\n{steps}"


class StepGenerationError(Exception):
    """Candidates could not be generated; the message names the backend, URL or model."""


class PromptTemplate:
    """A ``str.format`` template with exactly the fields ``{problem}`` and ``{steps}``.

    ``{steps}`` expands to every step followed by a newline ("" before the first step).
    Literal braces in the template are written ``{{`` and ``}}``; braces inside the
    problem or the steps (LaTeX) need no escaping because values are not re-parsed.
    """

    def __init__(self, template: str = DEFAULT_PROMPT_TEMPLATE) -> None:
        try:
            fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
        except ValueError as exc:
            raise ValueError(f"prompt template is not a valid format string: {exc}") from None
        if fields != {"problem", "steps"}:
            raise ValueError(f"prompt template must use exactly {{problem}} and {{steps}}, found {sorted(fields)}")
        self.template = template

    def render(self, *, problem: str, steps: Sequence[str]) -> str:
        return self.template.format(problem=problem, steps="".join(f"{step}\n" for step in steps))


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. ``temperature=0`` means greedy (one distinct candidate at most)."""

    k: int = 4
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int | None = None
    # Extra rounds for samples that stopped before holding a whole step (a blank line
    # before "# Answer", or the bare marker); see splitting.py. HTTP backend only: the
    # local backend's stopping rule already waits for a whole step.
    max_followups: int = 4

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k must be at least 1, got {self.k}")
        if not 0.0 <= self.temperature <= 2.0:
            raise ValueError(f"temperature must lie in [0, 2], got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must lie in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.max_followups < 0:
            raise ValueError(f"max_followups must not be negative, got {self.max_followups}")


@dataclass(frozen=True)
class SamplingRecord:
    """Everything needed to say how a candidate set was produced; stored beside it."""

    backend: str
    model: str
    k: int
    temperature: float
    top_p: float
    max_tokens: int
    seed: int | None
    stop: tuple[str, ...]
    prompt_template: str
    # Backend-specific facts (endpoint URL, device, dtype, requests made).
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["stop"] = list(self.stop)
        return data


@dataclass(frozen=True)
class StepCandidates:
    """Up to K distinct candidate next steps, in sampling order, and how they were made.

    Fewer than K when samples coincide (``duplicates``), end without a step (``empty``:
    the model ended the solution) or never complete a step within ``max_tokens`` and
    the follow-up rounds (``incomplete``).
    """

    texts: tuple[str, ...]
    sampling: SamplingRecord
    samples: int
    duplicates: int = 0
    empty: int = 0
    incomplete: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "texts": list(self.texts),
            "sampling": self.sampling.as_dict(),
            "samples": self.samples,
            "duplicates": self.duplicates,
            "empty": self.empty,
            "incomplete": self.incomplete,
        }


class StepGenerator(Protocol):
    """Proposes candidate next steps. Implementations are blocking; call them from a worker."""

    name: str

    def generate(self, *, problem: str, steps: Sequence[str], seed: int | None = None) -> StepCandidates:
        """K candidates for the step after ``steps``; ``seed`` overrides the configured one."""
        ...


@dataclass(frozen=True)
class SolutionDraw:
    """One whole solution as a backend returned it, with what identifies the draw."""

    text: str
    # "stop": the model ended it (end of sequence or a stop string); "length": cut at
    # max_tokens; another word if the server says something else.
    finish_reason: str
    # The server's response id (OpenAI-compatible "id"), or one made up locally.
    request_id: str
    choice_index: int
    seed: int | None


class SolutionSampler(Protocol):
    """Samples whole solutions (the prompt of the problem alone); blocking, call from a worker."""

    name: str
    params: SamplingParams
    prompt_template: PromptTemplate

    @property
    def model_name(self) -> str: ...

    @property
    def endpoint(self) -> str:
        """Where the draws come from, for messages and provenance: a URL, or a local model and device."""
        ...

    def sample_solutions(self, *, problem: str, n: int, seed: int | None) -> list[SolutionDraw]:
        """Exactly ``n`` draws for ``problem``; ``seed`` seeds the first of them (None: unseeded)."""
        ...


@dataclass
class SampleOutcome:
    """One sample after splitting: its step, or why it has none."""

    step: FirstStep
    ended: bool  # the model stopped on its own (end of sequence), nothing more will come


def collect_candidates(outcomes: Sequence[SampleOutcome], *, sampling: SamplingRecord, samples: int) -> StepCandidates:
    """Apply the acceptance rules shared by every backend and count what was dropped."""
    accepted: list[str] = []
    empty = incomplete = 0
    for outcome in outcomes:
        text = outcome.step.text
        if text is not None and (outcome.step.complete or outcome.ended):
            accepted.append(text)
        elif text is None and outcome.ended:
            empty += 1
        else:
            incomplete += 1
    distinct = dedupe(accepted)
    return StepCandidates(
        texts=tuple(distinct),
        sampling=sampling,
        samples=samples,
        duplicates=len(accepted) - len(distinct),
        empty=empty,
        incomplete=incomplete,
    )
