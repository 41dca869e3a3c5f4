"""Answer grading measured on CHAMP's real model solutions, beside its baselines.

Two sets, both read with the product's own code (``labeling.data.demo``: the solution is
the model message the "summarize" turn answers, split by the shared step splitter):

* **annotated**: the 540 conversations with a human first-wrong-step label
  (``fws_annotations``). The 96 without any wrong step should be graded correct;
  recall on them is the headline number. The 444 with a wrong step may still end in a
  right answer, so for them the share graded correct is reported, not a precision.
* **pool**: every distinct solution ``load_demo --all`` loads (about 13,300): how often
  an answer is found at all, and the verdicts.

Graders, all on the same solutions in the same run:

* ``old (<commit>)``: extractor and grader at that commit (read with ``git show``), as
  ``grade_solutions`` ran before: the last ``\\boxed{}``, ``# Answer`` or last line.
* ``exact match``: today's extracted answer equal to the reference, case and
  whitespace aside (what meaning-aware comparison adds).
* ``steps only``: today's grader on the solution text alone.
* ``steps + summary``: today's grader, the summary turn read when the steps state no
  answer (what ``load_demo`` stores).

Precision comes from the hand-checked table ``tests/activelearn/data/champ_correct_verdicts.jsonl``
("correct" verdicts drawn at random from the pool, 100 per seed, each read by hand); the
script prints, per sample, the precision as drawn and as the grader rules now on the same
solutions. ``--draw N`` draws a new sample of N correct verdicts for hand-checking
(written as JSON lines, verdicts left blank).

The layouts the grader was not tuned on have a table of their own,
``tests/activelearn/data/champ_layout_verdicts.jsonl``: ``--draw-layouts N --seed S`` draws N
solutions of each class below from the pool, whatever the grader rules (so the table
measures recall as well as precision), and the script reports both on it:

* ``remark ending``: the last step is a remark or a closing delimiter ("This is the final
  answer.", "Note: ...", "These are the ...", a lone ``\\]``);
* ``yes/no reference``: the reference answer is "Yes" or "No";
* ``quantified reference``: the reference is a bounded count ("Exactly one", "At least 1
  number", "At most 0 values (i.e., no such values)").

    python benchmarks/grading_champ.py
    python benchmarks/grading_champ.py --old-commit fe6b972 --processes 2
    python benchmarks/grading_champ.py --no-annotated --no-pool --draw-layouts 20 --seed 38
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
TABLE = ROOT / "tests" / "activelearn" / "data" / "champ_correct_verdicts.jsonl"
LAYOUT_TABLE = ROOT / "tests" / "activelearn" / "data" / "champ_layout_verdicts.jsonl"


@dataclass(frozen=True)
class Sample:
    problem_id: str  # CHAMP identifier, "P_Combinatorics_1"
    conversation: str  # "<model>|<condition>"
    text: str  # the solution, steps joined by newlines
    summary: str | None
    reference: str
    no_wrong_step: bool | None  # None: not annotated


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "annotate.settings")
    import django

    django.setup()


def read_samples() -> tuple[list[Sample], list[Sample]]:
    """(annotated, pool)."""
    import champ_dataset

    from labeling.data.demo import CHAMP_VERSION, solution_message
    from mathtext.splitting import split_steps

    dataset = champ_dataset.load(CHAMP_VERSION)
    annotated: list[Sample] = []
    for identifier, item in dataset.problems.items():
        for key, annotation in (item.fws_annotations or {}).items():
            found = solution_message(item.conversations[key].messages or [])
            if found is None or not found[0].text:
                continue
            message, summary = found
            annotated.append(
                Sample(
                    identifier,
                    key,
                    "\n".join(split_steps(message.text)),
                    summary,
                    item.answer,
                    annotation.start_idx is None,
                )
            )
    return annotated, read_pool()


def read_pool() -> list[Sample]:
    """Every distinct solution ``load_demo --all`` loads, in its order."""
    from labeling.data.demo import read_champ

    return [
        Sample(problem.unique_id.split("/", 1)[1], s.conversation, "\n".join(s.steps), s.summary, problem.answer, None)
        for problem in read_champ(solutions_per_problem=None)
        for s in problem.solutions
    ]


def old_grading(commit: str) -> ModuleType:
    """``activelearn/grading.py`` as it was at ``commit``, loaded as a module of its own."""
    source = subprocess.run(
        ["git", "show", f"{commit}:activelearn/grading.py"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    directory = Path(tempfile.mkdtemp(prefix="old-grading-"))
    (directory / "old_grading.py").write_text(source)
    sys.path.insert(0, str(directory))  # spawned workers import it by name
    spec = importlib.util.spec_from_file_location("old_grading", directory / "old_grading.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_grading"] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class Verdicts:
    correct: list[bool]
    answered: list[bool]
    seconds: float


def grade_new(samples: list[Sample], *, summary: bool, processes: int) -> tuple[Verdicts, list[str | None]]:
    from activelearn.grading import extract_final_answer, grade_many

    started = time.perf_counter()
    answers = [extract_final_answer(s.text, summary=s.summary if summary else None) for s in samples]
    graded = [i for i, answer in enumerate(answers) if answer is not None]
    results = grade_many([(answers[i] or "", samples[i].reference) for i in graded], processes=processes)
    correct = [False] * len(samples)
    answered = [False] * len(samples)
    for index, result in zip(graded, results, strict=True):
        correct[index], answered[index] = result.correct, result.answered
    elapsed = time.perf_counter() - started
    return Verdicts(correct, answered, elapsed), answers


def grade_exact(samples: list[Sample], answers: list[str | None]) -> Verdicts:
    def same(answer: str | None, reference: str) -> bool:
        return answer is not None and " ".join(answer.split()).lower() == " ".join(reference.split()).lower()

    return Verdicts(
        [same(a, s.reference) for a, s in zip(answers, samples, strict=True)], [a is not None for a in answers], 0.0
    )


def grade_old(samples: list[Sample], module: ModuleType, processes: int) -> Verdicts:
    started = time.perf_counter()
    answers = [module.extract_final_answer(s.text) for s in samples]
    results = module.grade_many(
        [(a or "", s.reference) for a, s in zip(answers, samples, strict=True)],
        processes=processes,
        grader=module.grade_in_process,
    )
    # The old grader called "no answer" different; "answered" is what it extracted.
    return Verdicts([r.correct for r in results], [bool(a) for a in answers], time.perf_counter() - started)


def _share(count: int, total: int) -> str:
    return f"{count}/{total} = {count / total:.3f}" if total else "-"


def report_annotated(annotated: list[Sample], graders: dict[str, Verdicts]) -> None:
    clean = [i for i, s in enumerate(annotated) if s.no_wrong_step]
    flawed = [i for i, s in enumerate(annotated) if not s.no_wrong_step]
    print(f"\nAnnotated: {len(annotated)} solutions, {len(clean)} without a wrong step, {len(flawed)} with one")
    print(
        "| grader | recall, no wrong step | no answer found, no wrong step | graded correct, with a wrong step "
        "| no answer found, with a wrong step | seconds (540) |"
    )
    print("|---|---|---|---|---|---|")
    for name, v in graders.items():
        print(
            f"| {name} | {_share(sum(v.correct[i] for i in clean), len(clean))} "
            f"| {sum(not v.answered[i] for i in clean)} "
            f"| {_share(sum(v.correct[i] for i in flawed), len(flawed))} "
            f"| {sum(not v.answered[i] for i in flawed)} | {v.seconds:.1f} |"
        )


def report_pool(pool: list[Sample], graders: dict[str, Verdicts]) -> None:
    print(f"\nPool: {len(pool)} distinct solutions (load_demo --all)")
    print("| grader | answer found (parse rate) | no answer found | graded correct | graded wrong | seconds |")
    print("|---|---|---|---|---|---|")
    for name, v in graders.items():
        found = sum(v.answered)
        correct = sum(v.correct)
        print(
            f"| {name} | {_share(found, len(pool))} | {len(pool) - found} | {correct} | {found - correct} "
            f"| {v.seconds:.1f} |"
        )


def report_table(pool: list[Sample], answers: list[str | None]) -> None:
    """Precision from the hand-checked table: per sample, as drawn (every row was a
    "correct" verdict then) and as the grader rules on the same solutions now."""
    from activelearn.grading import grade_in_process

    if not TABLE.exists():
        print(f"\nNo hand-checked table at {TABLE.relative_to(ROOT)}")
        return
    where = {(s.problem_id, s.conversation): i for i, s in enumerate(pool)}
    rows = [json.loads(line) for line in TABLE.read_text().splitlines() if line.strip()]
    print(f"\nHand-checked table ({TABLE.relative_to(ROOT)})")
    print("| sample | rows | precision as drawn | graded correct now | of them right by hand (precision now) |")
    print("|---|---|---|---|---|")
    for sample in sorted({r["sample"] for r in rows}):
        part = [r for r in rows if r["sample"] == sample]
        right_then = sum(r["verdict"] == "correct" for r in part)
        now = [
            r
            for r in part
            if grade_in_process(answers[where[(r["problem_id"], r["conversation"])]] or "", r["reference"]).correct
        ]
        right_now = sum(r["verdict"] == "correct" for r in now)
        print(
            f"| {sample} | {len(part)} | {_share(right_then, len(part))} | {len(now)} | {_share(right_now, len(now))} |"
        )


def draw(pool: list[Sample], answers: list[str | None], verdicts: Verdicts, n: int, seed: int, out: Path) -> None:
    checked = set()
    if TABLE.exists():
        checked = {(r["problem_id"], r["conversation"]) for r in map(json.loads, TABLE.read_text().splitlines())}
    # Rows already in the table are not drawn again.
    candidates = [
        i
        for i, correct in enumerate(verdicts.correct)
        if correct and (pool[i].problem_id, pool[i].conversation) not in checked
    ]
    chosen = sorted(random.Random(seed).sample(candidates, min(n, len(candidates))))
    with out.open("w") as handle:
        for i in chosen:
            s = pool[i]
            row: dict[str, Any] = {
                "problem_id": s.problem_id,
                "conversation": s.conversation,
                "answer": answers[i],
                "reference": s.reference,
                "verdict": "",
                "reason": "",
            }
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"\nDrew {len(chosen)} of {len(candidates)} correct verdicts (seed {seed}) into {out}")


_REMARK_STEP = re.compile(
    r"^(?:(?:this|these|that|those|note|please note|i hope|remember|keep in mind)\b|(?:\\\]|\$\$|\\\))\s*$)"
    r"|\bremains the same\b",
    re.IGNORECASE,
)
_QUANTIFIED = re.compile(r"^(?:exactly|at least|at most)\b", re.IGNORECASE)
LAYOUTS = ("remark ending", "yes/no reference", "quantified reference")


def layout(sample: Sample) -> str | None:
    """The layout class a solution falls into (the first that fits), or None."""
    reference = sample.reference.strip().rstrip(".").lower()
    if reference in ("yes", "no"):
        return "yes/no reference"
    if _QUANTIFIED.match(reference):
        return "quantified reference"
    last = sample.text.strip().splitlines()[-1].strip() if sample.text.strip() else ""
    return "remark ending" if _REMARK_STEP.search(last) else None


def layout_draw(pool: list[Sample], n: int, seed: int) -> list[tuple[str, int]]:
    """(class, pool index) of ``n`` solutions of each layout class, drawn whatever the
    grader rules: one ``random.Random(seed)`` samples the classes in ``LAYOUTS`` order."""
    rng = random.Random(seed)
    drawn: list[tuple[str, int]] = []
    for name in LAYOUTS:
        candidates = [i for i, s in enumerate(pool) if layout(s) == name]
        drawn.extend((name, i) for i in sorted(rng.sample(candidates, min(n, len(candidates)))))
    return drawn


def draw_layouts(pool: list[Sample], n: int, seed: int, out: Path) -> None:
    drawn = layout_draw(pool, n, seed)
    with out.open("w") as handle:
        for name, i in drawn:
            s = pool[i]
            row = {
                "sample": f"{name}, seed {seed}",
                "problem_id": s.problem_id,
                "conversation": s.conversation,
                "reference": s.reference,
                "verdict": "",
                "reason": "",
            }
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"Drew {len(drawn)} solutions, {n} per layout class (seed {seed}), into {out}")


def report_layouts(pool: list[Sample], answers: list[str | None]) -> None:
    """Precision and recall on the hand-checked layout table, per class and in all."""
    from activelearn.grading import grade_in_process

    if not LAYOUT_TABLE.exists():
        print(f"\nNo hand-checked table at {LAYOUT_TABLE.relative_to(ROOT)}")
        return
    where = {(s.problem_id, s.conversation): i for i, s in enumerate(pool)}
    rows = [json.loads(line) for line in LAYOUT_TABLE.read_text().splitlines() if line.strip()]
    print(f"\nHand-checked layout table ({LAYOUT_TABLE.relative_to(ROOT)})")
    print("| sample | rows | right by hand | graded correct | precision | recall |")
    print("|---|---|---|---|---|---|")
    totals = [0, 0, 0, 0]
    for sample in [*sorted({r["sample"] for r in rows}), "all"]:
        part = [r for r in rows if sample in ("all", r["sample"])]
        right = [r["verdict"] == "correct" for r in part]
        graded = [
            grade_in_process(answers[where[(r["problem_id"], r["conversation"])]] or "", r["reference"]).correct
            for r in part
        ]
        both = sum(g and h for g, h in zip(graded, right, strict=True))
        totals = [len(part), sum(right), sum(graded), both]
        print(
            f"| {sample} | {totals[0]} | {totals[1]} | {totals[2]} | {_share(both, totals[2])} "
            f"| {_share(both, totals[1])} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old-commit", default="fe6b972", help="the baseline grader's commit")
    parser.add_argument("--processes", type=int, default=2, help="grading worker processes")
    parser.add_argument("--no-pool", action="store_true", help="annotated solutions only")
    parser.add_argument("--no-annotated", action="store_true", help="the pool only")
    parser.add_argument(
        "--draw-layouts", type=int, default=0, metavar="N", help="draw N solutions per layout class for hand-checking"
    )
    parser.add_argument("--draw", type=int, default=0, metavar="N", help="draw N correct verdicts for hand-checking")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--draw-to", type=Path, default=Path("champ_verdicts_draw.jsonl"))
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)

    _setup_django()
    load_started = time.perf_counter()
    annotated, pool = read_samples()
    print(f"Read CHAMP in {time.perf_counter() - load_started:.1f} s; load average {os.getloadavg()[0]:.2f}")

    if args.draw_layouts:
        draw_layouts(pool, args.draw_layouts, args.seed, args.draw_to)
    if not args.no_annotated:
        old = old_grading(args.old_commit)
        graders: dict[str, Verdicts] = {}
        graders[f"old ({args.old_commit})"] = grade_old(annotated, old, args.processes)
        steps_only, steps_only_answers = grade_new(annotated, summary=False, processes=args.processes)
        graders["exact match"] = grade_exact(annotated, steps_only_answers)
        graders["steps only"] = steps_only
        graders["steps + summary"], _ = grade_new(annotated, summary=True, processes=args.processes)
        report_annotated(annotated, graders)

    if not args.no_pool:
        pool_graders: dict[str, Verdicts] = {}
        pool_steps, pool_steps_answers = grade_new(pool, summary=False, processes=args.processes)
        pool_graders["exact match"] = grade_exact(pool, pool_steps_answers)
        pool_graders["steps only"] = pool_steps
        pool_summary, pool_answers = grade_new(pool, summary=True, processes=args.processes)
        pool_graders["steps + summary"] = pool_summary
        report_pool(pool, pool_graders)
        per_solution = [v.seconds / len(pool) * 1000 for v in (pool_steps, pool_summary)]
        print(f"\nms per solution (extract + grade, {args.processes} processes): {statistics.median(per_solution):.2f}")
        reasons = Counter(
            "no answer" if a is None else ("correct" if c else "wrong")
            for a, c in zip(pool_answers, pool_summary.correct, strict=True)
        )
        print(f"pool verdicts, steps + summary: {dict(reasons)}")
        report_table(pool, pool_answers)
        report_layouts(pool, pool_answers)
        if args.draw:
            draw(pool, pool_answers, pool_summary, args.draw, args.seed, args.draw_to)
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
