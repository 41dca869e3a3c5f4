"""A synthetic word-problem domain where the correctness of every step is known exactly.

A problem is a stock of items that changes through a few events ("sells 118 pens",
"receives 4 more boxes", "doubles its stock"). Its plan is a list of binary operations
whose operands are problem constants or earlier results. A sampled solution executes the
plan and may inject an error at a step: a wrong result (arithmetic slip), a wrong
operator, a wrongly copied operand, or a skipped sub-step. Later steps are computed
correctly *from the values written before them*, so errors propagate to the final answer
the way they do in real model samples, and can (rarely) cancel.

Ground truth per step: a step is correct iff its written expression uses the operator and
operands the plan calls for, given the values actually written earlier, and its written
result equals that expression's value. Nothing here guesses; ``first_error`` and
``final_correct`` are recomputed from the written numbers.

Subtle errors (off by 1, 2 or 10; a digit of an operand changed) leave a text that looks
right at a glance; obvious ones (a result off by an order of magnitude, a "+" where the
story says "sells", a number that appears nowhere) do not. The mix is a knob, so the
"convincing wrong-answer" regime of the PRM800K protocol can be reproduced.

Systematic errors (``DomainConfig.systematic_share`` > 0): a real generator's mistakes are
probable under the generator, because it made them. A *misconception* is a wrong rule for
one kind of event ("doubles" read as "+ 2", "gives away 3 boxes" as "- 3"), held by a
sample with a probability that depends on the problem's setting (common in its home
settings, rarer elsewhere) and then applied at every step it covers, the same way in every
sample. An LM pretrained on the generator's own samples learns how often each rule is
held in each setting, so a misconception step is no surprise to it; only a label says
which of the two ways is right.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

Operator = Literal["+", "-", "*"]
ErrorKind = Literal["arithmetic", "wrong_operation", "copied_wrong_number", "skipped_step", "misconception"]
StepKind = Literal["compute", "filler", "answer"]
# What a plan step stands for in the story: the misconceptions are rules about these.
Event = Literal["start", "sell", "buy", "containers", "receive", "give", "scale"]

_APPLY: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
}


def apply(operator: str, left: int, right: int) -> int:
    return _APPLY[operator](left, right)


@dataclass(frozen=True)
class Operand:
    """A problem constant (``step is None``) or the result written at plan step ``step``."""

    constant: int | None = None
    step: int | None = None

    def __post_init__(self) -> None:
        if (self.constant is None) == (self.step is None):
            raise ValueError("an operand is either a constant or a reference to an earlier step")


@dataclass(frozen=True)
class PlanStep:
    operator: Operator
    left: Operand
    right: Operand
    phrases: tuple[str, ...]  # templates with {l} {op} {r} {v} {unit} {n} placeholders
    unit: str
    noun: str = ""  # the container word, for phrases such as "4 boxes hold ..."
    # Set on the k * per-container step of a "receives k containers" event: skipping it
    # means the next step uses k itself, the classic "forgot to multiply" slip.
    skippable: bool = False
    event: Event = "start"


@dataclass(frozen=True)
class Problem:
    problem_id: str
    text: str
    plan: tuple[PlanStep, ...]
    answer: int
    setting: str = ""  # the actor ("A bakery", "Maya"): the context misconceptions depend on


@dataclass(frozen=True)
class Expression:
    left: int
    operator: Operator
    right: int
    result: int

    @property
    def holds(self) -> bool:
        return apply(self.operator, self.left, self.right) == self.result


@dataclass(frozen=True)
class GeneratedStep:
    text: str
    kind: StepKind
    # What the step writes and what a correct step would have written at this point
    # (given the earlier written values). None for filler steps.
    written: Expression | None = None
    expected: Expression | None = None
    value: int | None = None  # the result carried forward (answer steps: the answer given)
    expected_value: int | None = None
    error: ErrorKind | None = None  # the injected error, None when the step is correct
    subtle: bool | None = None
    plan_index: int | None = None  # the plan step a compute step executes
    misconception: str | None = None  # the rule applied, for error == "misconception"

    @property
    def is_correct(self) -> bool:
        if self.kind == "filler":
            return True
        if self.kind == "answer":
            return self.value == self.expected_value
        return self.written == self.expected


@dataclass(frozen=True)
class GeneratedSolution:
    solution_id: str
    problem_id: str
    steps: tuple[GeneratedStep, ...]
    answer: str
    first_error: int | None  # index into ``steps`` of the first wrong step
    final_correct: bool
    subtle: bool | None  # subtlety of the first error; None for error-free solutions
    # The value written for every plan step (a skipped step: the value it should have
    # had), so a continuation from any prefix knows what was written before it.
    written_values: tuple[int, ...] = ()
    misconceptions: tuple[str, ...] = ()  # the rules this sample held and applied

    @property
    def step_texts(self) -> tuple[str, ...]:
        return tuple(step.text for step in self.steps)


@dataclass(frozen=True)
class DomainConfig:
    min_events: int = 1
    max_events: int = 3  # 1 event = 2-3 computation steps; 3 events = 4-7
    solution_error_rate: float = 0.6  # share of solutions that get a first error injected
    later_error_rate: float = 0.1  # per later step, once an error happened
    subtle_share: float = 0.5  # share of injected errors that are subtle
    common_error_share: float = 0.5  # of erroneous solutions, share making the problem's usual mistake
    filler_rate: float = 0.15  # chance of a neutral filler step before a computation step
    max_count: int = 12  # containers at the start
    max_per_container: int = 25
    # Share of the error process that is systematic: random errors strike a solution at
    # solution_error_rate x (1 - share), and each misconception is held at share x its
    # setting's rate (misconception_home_rate in its home settings, misconception_rate
    # elsewhere). 0 is the random-corruption domain, 1 misconceptions only.
    # The rates are high on purpose: when a misconception is held as often as not, the LM
    # cannot tell from its own probabilities which of the two ways is the right one.
    systematic_share: float = 0.0
    misconception_home_rate: float = 0.9
    misconception_rate: float = 0.25
    # The misconceptions the generator holds at all (None: every one in MISCONCEPTIONS).
    # With misconception_rate 0 and a few held, the generator is mostly right and wrong
    # in recognisable settings only, believing itself there (the "home" domain).
    held_misconceptions: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.held_misconceptions is not None:
            object.__setattr__(self, "held_misconceptions", tuple(self.held_misconceptions))
            known = {m.name for m in MISCONCEPTIONS}
            unknown = sorted(set(self.held_misconceptions) - known)
            if unknown:
                names = ", ".join(sorted(known))
                raise ValueError(f"DomainConfig.held_misconceptions: unknown {', '.join(unknown)} (known: {names})")
        for name in ("systematic_share", "misconception_home_rate", "misconception_rate", "solution_error_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"DomainConfig.{name} must be within [0, 1], got {value!r}")


# ------------------------------------------------------------------------------- problems

_SETTINGS = (
    ("A shop", "It", "its", "box", "boxes", "pen", "pens"),
    ("Maya", "She", "her", "pack", "packs", "card", "cards"),
    ("A bakery", "It", "its", "tray", "trays", "cookie", "cookies"),
    ("Omar", "He", "his", "bag", "bags", "marble", "marbles"),
    ("A library", "It", "its", "shelf", "shelves", "book", "books"),
    ("A farm stand", "It", "its", "crate", "crates", "apple", "apples"),
    ("Lena", "She", "her", "jar", "jars", "button", "buttons"),
    ("A school", "It", "its", "carton", "cartons", "pencil", "pencils"),
)

_START = (
    "So {l} {op} {r} = {v} {unit} to begin with.",
    "At the start there are {l} {op} {r} = {v} {unit}.",
    "The {n} hold {l} {op} {r} = {v} {unit}.",
)
_SELL = (
    "After selling {r}, there are {l} {op} {r} = {v} {unit}.",
    "Selling {r} leaves {l} {op} {r} = {v} {unit}.",
)
_BUY = (
    "Buying {r} more gives {l} {op} {r} = {v} {unit}.",
    "With {r} more, there are {l} {op} {r} = {v} {unit}.",
)
_CONTAINERS = (
    "{l} {n} hold {l} {op} {r} = {v} {unit}.",
    "That is {l} {op} {r} = {v} {unit} in the {n}.",
)
_RECEIVE = (
    "So now there are {l} {op} {r} = {v} {unit}.",
    "Adding them gives {l} {op} {r} = {v} {unit}.",
)
_GIVE = (
    "So {l} {op} {r} = {v} {unit} are left.",
    "Giving them away leaves {l} {op} {r} = {v} {unit}.",
)
_SCALE = (
    "The stock grows to {l} {op} {r} = {v} {unit}.",
    "So there are {l} {op} {r} = {v} {unit} now.",
)
_FILLERS = (
    "Let's go through the events in order.",
    "I need to keep track of the {unit}.",
    "Now I'll look at the next event.",
)


def generate_problem(problem_id: str, rng: random.Random, config: DomainConfig) -> Problem:
    actor, pronoun, possessive, container, containers, _item, items = rng.choice(_SETTINGS)
    count = rng.randint(2, config.max_count)
    per = rng.randint(3, config.max_per_container)
    plan: list[PlanStep] = [
        PlanStep("*", Operand(constant=count), Operand(constant=per), _START, items, containers),
    ]
    stock = count * per
    sentences = [f"{actor} has {count} {containers} of {per} {items} each."]
    for _ in range(rng.randint(config.min_events, config.max_events)):
        previous = Operand(step=len(plan) - 1)
        kind = rng.choice(("sell", "buy", "receive", "give", "scale"))
        if kind == "give" and stock <= per:
            kind = "buy"
        if kind == "sell" and stock < 2:
            kind = "buy"
        if kind == "scale" and stock > 400:
            kind = "sell"
        if kind == "sell":
            amount = rng.randint(1, stock - 1)
            sentences.append(f"{pronoun} sells {amount} {items}.")
            plan.append(PlanStep("-", previous, Operand(constant=amount), _SELL, items, event="sell"))
            stock -= amount
        elif kind == "buy":
            amount = rng.randint(1, 60)
            sentences.append(f"{pronoun} buys {amount} more {items}.")
            plan.append(PlanStep("+", previous, Operand(constant=amount), _BUY, items, event="buy"))
            stock += amount
        elif kind in ("receive", "give"):
            limit = 6 if kind == "receive" else max(1, min(6, stock // per - 1))
            boxes = rng.randint(1, max(1, limit))
            verb = "receives" if kind == "receive" else "gives away"
            more = " more" if kind == "receive" else ""
            sentences.append(f"{pronoun} {verb} {boxes}{more} {containers if boxes > 1 else container}.")
            plan.append(
                PlanStep(
                    "*",
                    Operand(constant=boxes),
                    Operand(constant=per),
                    _CONTAINERS,
                    items,
                    containers if boxes > 1 else container,
                    skippable=True,
                    event="containers",
                )
            )
            operator: Operator = "+" if kind == "receive" else "-"
            plan.append(
                PlanStep(
                    operator,
                    previous,
                    Operand(step=len(plan) - 1),
                    _RECEIVE if kind == "receive" else _GIVE,
                    items,
                    event="receive" if kind == "receive" else "give",
                )
            )
            stock = stock + boxes * per if kind == "receive" else stock - boxes * per
        else:
            factor = rng.choice((2, 3))
            sentences.append(f"{pronoun} {'doubles' if factor == 2 else 'triples'} {possessive} stock of {items}.")
            plan.append(PlanStep("*", previous, Operand(constant=factor), _SCALE, items, event="scale"))
            stock *= factor
    subject = "the " + actor[2:] if actor.startswith("A ") else actor
    sentences.append(f"How many {items} does {subject} have now?")
    return Problem(problem_id=problem_id, text=" ".join(sentences), plan=tuple(plan), answer=stock, setting=actor)


def generate_problems(count: int, seed: int, config: DomainConfig | None = None, prefix: str = "sim") -> list[Problem]:
    config = config or DomainConfig()
    # The prefix is part of the stream: pool ("train"), held-out ("eval") and pretraining
    # ("pretrain") problems of one seed must be different problems, not renamed copies.
    rng = random.Random(f"problems:{prefix}:{seed}")
    return [generate_problem(f"{prefix}-{seed}-{index}", rng, config) for index in range(count)]


# ------------------------------------------------------------------------------ solutions


def _perturb_small(value: int, rng: random.Random) -> int:
    return value + rng.choice((-10, -2, -1, 1, 2, 10))


def _perturb_large(value: int, rng: random.Random) -> int:
    options = [value * 10 + rng.randint(0, 9), value + rng.randint(50, 300), max(1, value // 10) - rng.randint(1, 9)]
    return rng.choice([option for option in options if option != value] or [value + 137])


def _perturb_digit(value: int, rng: random.Random) -> int:
    """Change one digit (or swap two): 118 -> 113, 118 -> 181. Never returns ``value``."""
    digits = list(str(abs(value)))
    for _ in range(10):
        candidate = list(digits)
        if len(candidate) > 1 and rng.random() < 0.4:
            i = rng.randrange(len(candidate) - 1)
            candidate[i], candidate[i + 1] = candidate[i + 1], candidate[i]
        else:
            i = rng.randrange(len(candidate))
            candidate[i] = str(rng.choice([d for d in range(10) if str(d) != candidate[i]]))
        if candidate[0] == "0" and len(candidate) > 1:
            continue
        result = int("".join(candidate)) * (-1 if value < 0 else 1)
        if result != value:
            return result
    return value + 1


def _compute_step(
    template: str,
    written: Expression,
    expected: Expression,
    plan_step: PlanStep,
    index: int,
    *,
    error: ErrorKind | None = None,
    subtle: bool | None = None,
    misconception: str | None = None,
) -> GeneratedStep:
    """A compute step as written (``written``) beside what the plan called for."""
    return GeneratedStep(
        text=_render(template, written, plan_step),
        kind="compute",
        written=written,
        expected=expected,
        value=written.result,
        expected_value=expected.result,
        error=error,
        subtle=subtle,
        plan_index=index,
        misconception=misconception,
    )


def _render(template: str, expression: Expression, plan_step: PlanStep) -> str:
    return template.format(
        l=expression.left,
        op=expression.operator,
        r=expression.right,
        v=expression.result,
        unit=plan_step.unit,
        n=plan_step.noun,
    )


_WRONG_OPERATOR: dict[str, Operator] = {"+": "-", "-": "+", "*": "+"}


def _inject(kind: ErrorKind, correct: Expression, plan_step: PlanStep, subtle: bool, rng: random.Random) -> Expression:
    if kind == "arithmetic":
        wrong = _perturb_small(correct.result, rng) if subtle else _perturb_large(correct.result, rng)
        return Expression(correct.left, correct.operator, correct.right, wrong)
    if kind == "wrong_operation":
        operator = _WRONG_OPERATOR[correct.operator]
        return Expression(correct.left, operator, correct.right, apply(operator, correct.left, correct.right))
    # copied_wrong_number: prefer a constant operand, the number a reader copies from the text
    side = "right" if plan_step.right.constant is not None or plan_step.left.constant is None else "left"
    original = correct.right if side == "right" else correct.left
    copied = _perturb_digit(original, rng) if subtle else original + rng.randint(20, 90)
    left, right = (correct.left, copied) if side == "right" else (copied, correct.right)
    return Expression(left, correct.operator, right, apply(correct.operator, left, right))


def _error_kinds(plan_step: PlanStep, next_step: PlanStep | None, subtle: bool) -> list[ErrorKind]:
    if subtle:
        return ["arithmetic", "copied_wrong_number"]
    kinds: list[ErrorKind] = ["arithmetic", "wrong_operation", "copied_wrong_number"]
    if plan_step.skippable and next_step is not None:
        kinds.append("skipped_step")
    return kinds


# ---------------------------------------------------------------------- misconceptions


@dataclass(frozen=True)
class Misconception:
    """A wrong rule for one kind of event, common in its ``home`` settings."""

    name: str
    event: Event
    home: frozenset[str]
    description: str


MISCONCEPTIONS: tuple[Misconception, ...] = (
    Misconception(
        "start_as_add", "start", frozenset({"Lena", "A school"}), "c containers of p each: c + p instead of c * p"
    ),
    Misconception(
        "buy_as_containers", "buy", frozenset({"Omar", "Maya"}), "buys n more items: adds n containers' worth"
    ),
    Misconception(
        "forget_multiply",
        "containers",
        frozenset({"A bakery", "A farm stand"}),
        "receives or gives k containers: adds or takes k, not k * per container",
    ),
    Misconception("scale_as_add", "scale", frozenset({"A shop", "A library"}), "doubles / triples: + 2 / + 3"),
    Misconception(
        "sell_from_start",
        "sell",
        frozenset({"Maya", "Lena"}),
        "sells n: takes n from the starting stock, forgetting the events since",
    ),
)
MISCONCEPTION_BY_EVENT: dict[str, Misconception] = {m.event: m for m in MISCONCEPTIONS}


def misconception_rate(misconception: Misconception, setting: str, config: DomainConfig) -> float:
    """How often a sample of a problem in ``setting`` holds the rule."""
    if config.held_misconceptions is not None and misconception.name not in config.held_misconceptions:
        return 0.0
    rate = config.misconception_home_rate if setting in misconception.home else config.misconception_rate
    return config.systematic_share * rate


def _applies(misconception: Misconception, plan: Sequence[PlanStep], index: int) -> bool:
    """Whether the rule changes what plan step ``index`` writes."""
    step = plan[index]
    if step.event != misconception.event:
        return False
    if misconception.name == "sell_from_start":
        return step.left.step not in (None, 0)  # right after the start there is nothing to forget
    if misconception.name == "forget_multiply":
        return index + 1 < len(plan)
    return True


def _misconceived(
    misconception: Misconception, plan: Sequence[PlanStep], index: int, left: int, right: int, written: Sequence[int]
) -> Expression:
    """What a sample holding the rule writes at plan step ``index`` (not forget_multiply,
    which writes nothing there and changes the next step)."""
    if misconception.name == "start_as_add":
        return Expression(left, "+", right, left + right)
    if misconception.name == "buy_as_containers":
        per = plan[0].right.constant
        assert per is not None
        return Expression(left, "+", right * per, left + right * per)
    if misconception.name == "scale_as_add":
        return Expression(left, "+", right, left + right)
    if misconception.name == "sell_from_start":
        return Expression(written[0], "-", right, written[0] - right)
    raise ValueError(f"misconception {misconception.name!r} writes no expression of its own")


def _held_misconceptions(
    problem: Problem, start: int, rng: random.Random, config: DomainConfig, inherited: dict[str, bool]
) -> set[str]:
    """The rules a sample holds for the plan steps from ``start`` on: a rule whose event
    the prefix already met keeps the prefix's choice (``inherited``), others are drawn."""
    held: set[str] = set()
    for misconception in MISCONCEPTIONS:
        if not any(_applies(misconception, problem.plan, i) for i in range(start, len(problem.plan))):
            continue
        if misconception.name in inherited:
            if inherited[misconception.name]:
                held.add(misconception.name)
        elif rng.random() < misconception_rate(misconception, problem.setting, config):
            held.add(misconception.name)
    return held


# ------------------------------------------------------------------------------ sampling


def sample_solution(
    problem: Problem,
    solution_id: str,
    rng: random.Random,
    config: DomainConfig | None = None,
) -> GeneratedSolution:
    """One sampled solution: the plan executed on the written values, errors injected at
    random and misconceptions applied where the sample holds them."""
    config = config or DomainConfig()
    beliefs: set[str] = set()
    if config.systematic_share > 0:
        # Their own stream: the random-error draws stay those of the same solution at
        # another share, so a sweep over the share compares like with like.
        beliefs = _held_misconceptions(problem, 0, random.Random(f"beliefs:{solution_id}"), config, {})
    return _execute(problem, solution_id, rng, config, beliefs, prefix=(), written_values=[], start=0, erred=False)


def continue_solution(
    problem: Problem,
    solution: GeneratedSolution,
    kept_steps: int,
    rng: random.Random,
    config: DomainConfig | None = None,
    solution_id: str | None = None,
) -> GeneratedSolution:
    """The generator's completion of ``solution``'s first ``kept_steps`` steps: the rest
    of the plan sampled afresh from the values written so far (Math-Shepherd's rollout).

    Random errors are drawn anew over the remaining steps; a misconception whose event
    the prefix already met stays as the prefix shows it (applied or not), the others are
    drawn at their rates.
    """
    config = config or DomainConfig()
    if not 1 <= kept_steps <= len(solution.steps):
        raise ValueError(f"kept_steps must be within [1, {len(solution.steps)}], got {kept_steps}")
    prefix = solution.steps[:kept_steps]
    if prefix[-1].kind == "answer":
        return solution
    done = [step.plan_index for step in prefix if step.plan_index is not None]
    start = max(done) + 1 if done else 0
    inherited: dict[str, bool] = {}
    for misconception in MISCONCEPTIONS:
        if any(_applies(misconception, problem.plan, i) for i in range(start)):
            inherited[misconception.name] = misconception.name in solution.misconceptions
    beliefs: set[str] = set()
    if config.systematic_share > 0:
        beliefs = _held_misconceptions(problem, start, rng, config, inherited)
    return _execute(
        problem,
        solution_id or f"{solution.solution_id}+{kept_steps}",
        rng,
        config,
        beliefs | {name for name, held in inherited.items() if held},
        prefix=prefix,
        written_values=list(solution.written_values[:start]),
        start=start,
        erred=any(not step.is_correct for step in prefix),
    )


def _execute(
    problem: Problem,
    solution_id: str,
    rng: random.Random,
    config: DomainConfig,
    beliefs: set[str],
    *,
    prefix: Sequence[GeneratedStep],
    written_values: list[int],
    start: int,
    erred: bool,
) -> GeneratedSolution:
    plan = problem.plan
    random_error_rate = config.solution_error_rate * (1.0 - config.systematic_share)
    # The first error may also sit on the answer line (a miscopied final number).
    first_error_at = rng.randrange(start, len(plan) + 1) if rng.random() < random_error_rate else None
    first_subtle = rng.random() < config.subtle_share
    # A generator repeats its favourite mistake on a problem, so wrong answers collide and
    # majority vote can be fooled; the trap's site, kind and wrong value are fixed per problem.
    trap_rng: random.Random | None = None
    if first_error_at is not None and rng.random() < config.common_error_share:
        trap_rng = random.Random(f"trap:{problem.problem_id}")
        trap_at = trap_rng.randrange(len(plan))
        if trap_at >= start:
            first_error_at = trap_at
            first_subtle = trap_rng.random() < config.subtle_share
        else:
            trap_rng = None
    steps: list[GeneratedStep] = list(prefix)
    applied: list[str] = list(dict.fromkeys(step.misconception for step in prefix if step.misconception))
    skip_next_sum: str | None = None  # the error kind of a skipped container step
    first_kind_subtle: bool | None = next((step.subtle for step in prefix if not step.is_correct), None)
    for index in range(start, len(plan)):
        plan_step = plan[index]
        if rng.random() < config.filler_rate and index > 0:
            steps.append(GeneratedStep(text=rng.choice(_FILLERS).format(unit=plan_step.unit), kind="filler"))

        def resolve(operand: Operand) -> int:
            if operand.constant is not None:
                return operand.constant
            assert operand.step is not None
            return written_values[operand.step]

        left, right = resolve(plan_step.left), resolve(plan_step.right)
        expected = Expression(left, plan_step.operator, right, apply(plan_step.operator, left, right))
        template = rng.choice(plan_step.phrases)

        if skip_next_sum is not None:
            # The container step was skipped: this step adds the container count itself.
            kind_of_skip: ErrorKind = "misconception" if skip_next_sum == "forget_multiply" else "skipped_step"
            skip_next_sum = None
            skipped = plan[index - 1]
            assert skipped.left.constant is not None
            wrong_right = skipped.left.constant
            written = Expression(left, plan_step.operator, wrong_right, apply(plan_step.operator, left, wrong_right))
            written_values.append(written.result)
            steps.append(
                _compute_step(
                    template,
                    written,
                    expected,
                    plan_step,
                    index,
                    error=kind_of_skip,
                    subtle=kind_of_skip == "misconception",
                    misconception="forget_multiply" if kind_of_skip == "misconception" else None,
                )
            )
            if first_kind_subtle is None:
                first_kind_subtle = kind_of_skip == "misconception"
            continue

        rule = MISCONCEPTION_BY_EVENT.get(plan_step.event)
        if rule is not None and rule.name in beliefs and _applies(rule, plan, index):
            if rule.name not in applied:
                applied.append(rule.name)
            if rule.name == "forget_multiply":
                skip_next_sum = rule.name
                written_values.append(expected.result)
                continue
            written = _misconceived(rule, plan, index, left, right, written_values)
            written_values.append(written.result)
            steps.append(
                _compute_step(
                    template,
                    written,
                    expected,
                    plan_step,
                    index,
                    error="misconception" if written != expected else None,
                    subtle=True if written != expected else None,
                    misconception=rule.name if written != expected else None,
                )
            )
            if written != expected and first_kind_subtle is None:
                first_kind_subtle = True
            continue

        inject = index == first_error_at or (erred and rng.random() < config.later_error_rate)
        if not inject:
            written_values.append(expected.result)
            steps.append(_compute_step(template, expected, expected, plan_step, index))
            continue

        subtle = first_subtle if index == first_error_at else rng.random() < config.subtle_share
        next_step = plan[index + 1] if index + 1 < len(plan) else None
        error_rng = trap_rng if trap_rng is not None and index == first_error_at else rng
        kind = error_rng.choice(_error_kinds(plan_step, next_step, subtle))
        if first_kind_subtle is None:
            first_kind_subtle = subtle
        erred = True
        if kind == "skipped_step":
            # Nothing is written for this step; the written value is a placeholder so step
            # references keep their indices, and the next step uses the count instead.
            skip_next_sum = "skipped_step"
            written_values.append(expected.result)
            continue
        written = _inject(kind, expected, plan_step, subtle, error_rng)
        written_values.append(written.result)
        steps.append(_compute_step(template, written, expected, plan_step, index, error=kind, subtle=subtle))

    final_value = written_values[-1]
    answer = final_value
    answer_error: ErrorKind | None = None
    answer_subtle: bool | None = None
    if first_error_at == len(plan) or (erred and rng.random() < config.later_error_rate):
        answer_subtle = first_subtle if first_error_at == len(plan) else rng.random() < config.subtle_share
        answer = _perturb_digit(final_value, rng) if answer_subtle else final_value + rng.randint(20, 90)
        answer_error = "copied_wrong_number"
        if first_kind_subtle is None:
            first_kind_subtle = answer_subtle
    steps.append(
        GeneratedStep(
            text=f"# Answer\n\n{answer}",
            kind="answer",
            value=answer,
            expected_value=final_value,
            error=answer_error,
            subtle=answer_subtle,
        )
    )
    first_error = next((i for i, step in enumerate(steps) if not step.is_correct), None)
    return GeneratedSolution(
        solution_id=solution_id,
        problem_id=problem.problem_id,
        steps=tuple(steps),
        answer=str(answer),
        first_error=first_error,
        final_correct=answer == problem.answer,
        subtle=first_kind_subtle if first_error is not None else None,
        written_values=tuple(written_values),
        misconceptions=tuple(applied),
    )


def sample_solutions(
    problem: Problem, count: int, seed: int, config: DomainConfig | None = None, draw: str = ""
) -> list[GeneratedSolution]:
    """``count`` solutions of ``problem``; another ``draw`` gives a fresh, independent sample
    (a later generation's pool) with ids of its own (``<problem>/<draw>s<i>``)."""
    stream = f"solutions:{seed}:{problem.problem_id}" + (f":{draw}" if draw else "")
    rng = random.Random(stream)
    return [sample_solution(problem, f"{problem.problem_id}/{draw}s{index}", rng, config) for index in range(count)]


@dataclass(frozen=True)
class Dataset:
    problems: tuple[Problem, ...]
    solutions: dict[str, tuple[GeneratedSolution, ...]] = field(default_factory=dict)  # by problem id

    def all_solutions(self) -> list[GeneratedSolution]:
        return [solution for problem in self.problems for solution in self.solutions[problem.problem_id]]


def build_dataset(
    problem_count: int,
    solutions_per_problem: int,
    seed: int,
    config: DomainConfig | None = None,
    prefix: str = "sim",
) -> Dataset:
    problems = generate_problems(problem_count, seed, config, prefix)
    return Dataset(
        problems=tuple(problems),
        solutions={p.problem_id: tuple(sample_solutions(p, solutions_per_problem, seed, config)) for p in problems},
    )


def problem_texts(problems: Sequence[Problem]) -> dict[str, str]:
    return {problem.problem_id: problem.text for problem in problems}
