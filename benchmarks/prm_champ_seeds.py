"""PRM against ORM against the vote on CHAMP, over several split seeds (``prm_champ.py --seeds``).

One SQLite database holds everything a seed does not change: CHAMP's problems, the 540
human first-wrong-step labels as PRM800K records, and an unlabeled pool of ``--pool``
other conversations for *every* problem, graded once by the product's grader. A seed
then only re-splits the problems (``split_problems --seed S``) and runs, with the
product's commands:

* **PRM**: ``train_prm`` on the train split's human labels (threshold and aggregation
  chosen on the validation split);
* **ORM, equal labels**: ``train_prm --objective outcome`` on as many uniformly sampled
  graded train-split pool solutions as the PRM has labeled solutions, labelled only by
  the grader (no human label);
* **ORM, whole pool**: the same on every graded train-split pool solution (costs no label);
* **PRM + outcome labels**: the human labels plus the graded train-split pool as outcome
  labels (``--outcome-weight``, ``--outcome-targets``), each weight and target tried and
  the one chosen on the validation split kept;

then ``score_solutions`` of the validation and test pools and ``evaluate_prm`` of both
splits for every checkpoint. Every backbone forward pass goes through the feature cache
(``PRM_FEATURE_CACHE_DIR`` in the work directory), so after the first seed a seed costs
process start-ups and head fits, not forward passes.

The report gives each arm's test metrics per seed and their mean with a 95% t-interval
over seeds, beside majority vote (answers grouped by the grader's equivalence), random
and the oracle.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import prm_champ
from benchmarks.prm_champ import ROOT, _env, _load, _manage

STUDY_DOC = ROOT / "docs" / "prm.md"
# The block --write-docs replaces: <!-- NAME:begin --> ... <!-- NAME:end --> (--docs-block NAME).
DOCS_BLOCK = "champ-seeds"


def study_env(workdir: Path) -> dict[str, str]:
    env = _env(workdir)
    env["PRM_FEATURE_CACHE_DIR"] = str(workdir / "feature-cache")
    return env


def prepare(workdir: Path, *, pool: int, train_pool: int, seeds: list[int], validation: float, test: float) -> None:
    """The database every seed shares: problems, human labels, the graded pool of every problem.

    A problem that is a test problem under one of ``seeds`` gets ``pool`` conversations
    (best-of-16 needs 16 graded ones); the others ``train_pool``, which only outcome
    labels read. Scoring the pool is most of the cost, so this halves a study's CPU.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "db.sqlite3").unlink(missing_ok=True)
    env = study_env(workdir)
    _manage(env, "migrate", "--no-input")
    _manage(env, "load_demo", "--solutions-per-problem=0")
    _split(env, seeds[0], validation, test)
    prm_champ._django(env)
    from labeling.models import Problem

    problems = {
        uid: {"problem": text, "solution": solution, "answer": answer, "split": split}
        for uid, text, solution, answer, split in Problem.objects.filter(unique_id__startswith="champ/").values_list(
            "unique_id", "problem", "solution", "answer", "split"
        )
    }
    records, labeled = prm_champ.champ_records(problems)
    labels_file = workdir / "champ-labels.jsonl"
    labels_file.write_text("".join(json.dumps(r) + "\n" for r in records))
    _manage(env, "import_prm800k", str(labels_file))
    pool_file = workdir / "champ-pool.jsonl"
    tested = tested_problems(set(problems), seeds=seeds, validation=validation, test=test)
    rows = prm_champ.champ_pool(tested, labeled, pool, problems, records) + prm_champ.champ_pool(
        set(problems) - tested, labeled, train_pool, problems, records
    )
    pool_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _manage(env, "import_solutions", str(pool_file))
    grade(workdir, again=False)


def tested_problems(problems: set[str], *, seeds: list[int], validation: float, test: float) -> set[str]:
    from labeling.data.problem_splits import problem_split_for

    return {
        uid
        for uid in problems
        if any(
            problem_split_for(unique_id=uid, seed=seed, validation=validation, test=test) == "test" for seed in seeds
        )
    }


def grade(workdir: Path, *, again: bool) -> None:
    """Grade the pool (every problem, once); ``again``: every verdict anew (a changed grader)."""
    _manage(study_env(workdir), "grade_solutions", "--problem=champ/*", "--processes=2", "--no-progress",
            *([] if again else ["--ungraded"]))  # fmt: skip


def _split(env: dict[str, str], seed: int, validation: float, test: float) -> None:
    _manage(env, "split_problems", "--prefix=champ/", f"--seed={seed}", f"--validation={validation}", f"--test={test}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=ROOT / "var" / "prm-champ-seeds")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--pool", type=int, default=20, help="unlabeled conversations per test problem of a seed")
    parser.add_argument("--train-pool", type=int, default=8, help="unlabeled conversations per other problem")
    parser.add_argument("--validation", type=float, default=0.2)
    parser.add_argument("--test", type=float, default=0.2)
    parser.add_argument("--prepare-only", action="store_true", help="build and grade the shared database, then stop")
    parser.add_argument("--reuse", action="store_true", help="keep --workdir's database (prepared before)")
    parser.add_argument("--regrade", action="store_true", help="with --reuse: grade the whole pool again first")
    parser.add_argument("--curve", action="store_true", help="also learning curves in human and outcome labels")
    parser.add_argument("--again", action="store_true", help="run seeds already in --workdir's seeds.json again")
    parser.add_argument("--n", type=int, nargs="+", default=[1, 4, 16], help="best-of-N sizes")
    parser.add_argument("--train-option", action="append", default=[], metavar="KEY=VALUE", help="train_prm --KEY")
    parser.add_argument("--write-docs", action="store_true", help=f"put the tables in {STUDY_DOC.relative_to(ROOT)}")
    parser.add_argument("--docs-block", default=DOCS_BLOCK, help="the marked block of the docs page to replace")
    args = parser.parse_args(argv)
    workdir = args.workdir.resolve()
    started = time.monotonic()
    print(f"CHAMP seeds study in {workdir} (load {_load()})", file=sys.stderr)
    if not args.reuse:
        prepare(
            workdir,
            pool=args.pool,
            train_pool=args.train_pool,
            seeds=args.seeds,
            validation=args.validation,
            test=args.test,
        )
    else:
        # A database prepared by older code: bring its schema up to this code's.
        _manage(study_env(workdir), "migrate", "--no-input")
        if args.regrade:
            grade(workdir, again=True)
    if args.prepare_only:
        print(f"prepared in {time.monotonic() - started:.0f}s", file=sys.stderr)
        return 0
    env = study_env(workdir)
    prm_champ._django(env)
    results_file = workdir / "seeds.json"
    results: dict[str, Any] = json.loads(results_file.read_text()) if results_file.exists() else {}
    for seed in args.seeds:
        if str(seed) in results and not args.again:
            print(f"seed {seed}: kept from {results_file.name}", file=sys.stderr)
            continue
        results[str(seed)] = run_seed(env, seed, args)
        results_file.write_text(json.dumps(results, indent=2))
    lines = report(results, args, time.monotonic() - started)
    print("\n".join(lines))
    (workdir / "seeds.md").write_text("\n".join(lines) + "\n")
    if args.write_docs:
        write_docs(lines, args)
    return 0


# Outcome labels mixed into the PRM's training: each weight and target is tried on every
# seed and the one with the best validation step AUROC is the seed's "PRM + outcome"
# (chosen on validation only; the test split is read once, for the chosen one).
MIX_WEIGHTS = (0.25, 1.0)
MIX_TARGETS = ("final", "every_step")
CURVE_SHARES = (0.25, 0.5)
CURVE_OUTCOME = (80, 640)


def run_seed(env: dict[str, str], seed: int, args: argparse.Namespace) -> dict[str, Any]:
    from activelearn.models import PRMCheckpoint
    from labeling.models import Solution

    started = time.monotonic()
    _split(env, seed, args.validation, args.test)
    base = ["--split=train", "--validation-split=validation", "--no-progress", *prm_champ._options(args.train_option)]
    arms: dict[str, dict[str, Any]] = {}

    def train(name: str, *options: str) -> int:
        _manage(env, "train_prm", *base, *options)
        checkpoint = PRMCheckpoint.objects.order_by("-id").first()
        assert checkpoint is not None
        arms[name] = {"checkpoint": checkpoint.pk, "options": list(options), "metrics": checkpoint.metrics}
        return checkpoint.pk

    def evaluate(name: str, splits: tuple[str, ...]) -> None:
        checkpoint = arms[name]["checkpoint"]
        for split in splits:
            _manage(env, "score_solutions", f"--checkpoint={checkpoint}", f"--split={split}", "--unscored",
                    "--no-progress")  # fmt: skip
            out, _ = _manage(env, "evaluate_prm", f"--checkpoint={checkpoint}", f"--split={split}",
                             *[f"--n={n}" for n in args.n])  # fmt: skip
            arms[name][split] = json.loads(out)

    prm = train("PRM")
    human_solutions = int(PRMCheckpoint.objects.get(pk=prm).metrics.get("train_solutions") or 0)
    evaluate("PRM", ("validation", "test"))
    train("ORM, equal solutions", "--objective=outcome", f"--outcome-solutions={human_solutions}",
          f"--outcome-seed={seed}")  # fmt: skip
    evaluate("ORM, equal solutions", ("validation", "test"))
    train("ORM, whole pool", "--objective=outcome")
    evaluate("ORM, whole pool", ("validation", "test"))
    candidates = []
    for target in MIX_TARGETS:
        for weight in MIX_WEIGHTS:
            name = f"PRM + outcome ({target}, weight {weight})"
            train(name, f"--outcome-weight={weight}", f"--outcome-targets={target}")
            evaluate(name, ("validation",))
            candidates.append(name)
    chosen = max(candidates, key=lambda name: arms[name]["validation"].get("step_auroc") or 0.0)
    evaluate(chosen, ("test",))
    arms["PRM + outcome (chosen on validation)"] = {**arms[chosen], "chosen": chosen}
    if args.curve:
        # Learning curves (test split): the PRM on a quarter and half of the training
        # problems' human labels (a fixed hashed order), the ORM on fewer and more graded
        # solutions. The full-data points are the arms above.
        from labeling.models import Problem

        order = sorted(
            Problem.objects.filter(split="train", unique_id__startswith="champ/").values_list("unique_id", flat=True),
            key=lambda uid: hashlib.sha256(f"curve:{uid}".encode()).hexdigest(),
        )
        for share in CURVE_SHARES:
            name = f"curve: PRM on {share:.0%} of the training problems"
            train(name, *[f"--problem={uid}" for uid in order[: max(1, round(share * len(order)))]])
            evaluate(name, ("test",))
        for count in CURVE_OUTCOME:
            name = f"curve: ORM on {count} graded solutions"
            train(name, "--objective=outcome", f"--outcome-solutions={count}", f"--outcome-seed={seed}")
            evaluate(name, ("test",))
    graded = Solution.objects.filter(problem__split="train", is_correct__isnull=False).count()
    return {
        "seed": seed,
        "arms": arms,
        "human_train_solutions": human_solutions,
        "graded_train_pool": graded,
        "seconds": time.monotonic() - started,
    }


def _mean_interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and 95% t-interval over seeds (a seed is one draw of the split)."""
    from activelearn.simulation.stats import mean_interval

    clean = [v for v in values if v is not None and not math.isnan(v)]
    if not clean:
        return math.nan, math.nan, math.nan
    if len(clean) < 2:
        return clean[0], math.nan, math.nan
    mean, half = mean_interval(clean)
    return mean, mean - half, mean + half


def _get(result: dict[str, Any] | None, *path: str) -> float | None:
    value: Any = result
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return float(value) if isinstance(value, int | float) else None


def _fmt(value: float | None) -> str:
    return "—" if value is None or math.isnan(value) else f"{value:.3f}"


def _cell(values: list[float | None]) -> str:
    clean = [v for v in values if v is not None and not math.isnan(v)]
    mean, low, high = _mean_interval(clean)
    if math.isnan(mean):
        return "—"
    if math.isnan(low):
        return f"{mean:.3f}"
    return f"{mean:.3f} [{low:.3f}, {high:.3f}]"


ARM_ORDER = ("PRM", "ORM, equal solutions", "ORM, whole pool", "PRM + outcome (chosen on validation)")


# The PRM's solution score for best-of-N: its checkpoint's aggregation, which training
# chooses by the best expected best-of-4 weighted vote on the validation problems' graded pool
# (activelearn.prm.calibration). An ORM's score is its final step's.
def picked_aggregation(arm: str, entry: dict[str, Any]) -> str:
    if "ORM" in arm:
        return "last"
    return str((entry.get("test") or {}).get("aggregation") or "min")


def _pick(arm: str, entry: dict[str, Any], n: str) -> tuple[float | None, Any, Any, str]:
    """Test best-of-n of the arm's validation-chosen aggregation, its interval and its gap's interval."""
    name = picked_aggregation(arm, entry)
    row = (((entry.get("test") or {}).get("best_of_n") or {}).get(n)) or {}
    value = row.get(f"prm_{name}")
    return (
        None if value is None else float(value),
        row.get(f"prm_{name}_ci"),
        row.get(f"prm_{name}_minus_majority_ci"),
        name,
    )


def report(results: dict[str, Any], args: argparse.Namespace, seconds: float) -> list[str]:
    seeds = sorted(results, key=int)
    n = str(max(args.n))
    entries = {arm: [results[s]["arms"][arm] for s in seeds] for arm in ARM_ORDER}
    lines = [
        f"Split seeds {', '.join(seeds)} (train / validation / test = {1 - args.validation - args.test:.1f} / "
        f"{args.validation:.1f} / {args.test:.1f} of the problems); test split; mean over seeds "
        f"[95% t-interval over seeds]. Best-of-{n}: the expected accuracy over subsets of the test problems' "
        f"pool (`evaluate_prm`), answers grouped by the grader's equivalence for the votes. The pick is the "
        f"highest solution score under the checkpoint's aggregation, which training chooses by the best expected "
        f"best-of-4 weighted vote on the validation problems' graded pool unless the recipe fixes it (an ORM: its "
        f"final-step score); the weighted vote sums the same solution scores per answer.",
        "",
        f"| arm | step AUROC (chance 0.5) | first-error F1 | F1 random at prior | best-of-{n}: pick "
        f"| weighted vote | majority vote | pick - majority | weighted - majority |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in ARM_ORDER:
        tests = [entry.get("test") for entry in entries[arm]]
        pick = [_pick(arm, entry, n)[0] for entry in entries[arm]]
        weighted = [_get(r, "best_of_n", n, "weighted") for r in tests]
        majority = [_get(r, "best_of_n", n, "majority") for r in tests]
        lines.append(
            f"| {arm} | {_cell([_get(r, 'step_auroc') for r in tests])} | "
            f"{_cell([_get(r, 'first_error', 'f1') for r in tests])} | "
            f"{_cell([_get(r, 'first_error_baselines', 'random_at_prior', 'f1') for r in tests])} | "
            f"{_cell(pick)} | {_cell(weighted)} | {_cell(majority)} | {_cell(_minus(pick, majority))} | "
            f"{_cell(_minus(weighted, majority))} |"
        )
    prm_tests = [entry.get("test") for entry in entries["PRM"]]
    lines += [
        "",
        f"Best-of-{n} baselines on the same subsets: random pick "
        f"{_cell([_get(r, 'best_of_n', n, 'random') for r in prm_tests])}, oracle (some candidate right) "
        f"{_cell([_get(r, 'best_of_n', n, 'oracle') for r in prm_tests])}.",
        "",
        *goals(entries, prm_tests, n),
        "",
        "Per seed (test split; in brackets the problem-bootstrap 95% interval of the cell):",
        "",
        f"| seed | arm | labeled / outcome solutions | step AUROC | first-error F1 | best-of-{n} pick (aggregation) "
        f"| weighted | majority | pick - majority | weighted - majority |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for index, seed in enumerate(seeds):
        for arm in ARM_ORDER:
            entry = entries[arm][index]
            r = entry.get("test") or {}
            row = (r.get("best_of_n") or {}).get(n) or {}
            metrics = entry.get("metrics") or {}
            value, value_ci, gap_ci, name = _pick(arm, entry, n)
            label = arm + (f" ({entry['chosen'].split('(', 1)[1].rstrip(')')})" if "chosen" in entry else "")
            lines.append(
                f"| {seed} | {label} | {metrics.get('train_solutions', 0)} / "
                f"{metrics.get('train_outcome_solutions', 0)} | {_fmt(_get(r, 'step_auroc'))} | "
                f"{_fmt(_get(r, 'first_error', 'f1'))} {_interval(r.get('first_error'), 'f1_ci')} | "
                f"{_fmt(value)} {_interval({'v': value_ci}, 'v')} ({name}) | {_fmt(row.get('weighted'))} | "
                f"{_fmt(row.get('majority'))} | {_fmt(_minus([value], [row.get('majority')])[0])} "
                f"{_interval({'v': gap_ci}, 'v')} | {_fmt(row.get('weighted_minus_majority'))} "
                f"{_interval(row, 'weighted_minus_majority_ci')} |"
            )
    lines += curve_table(results, seeds, n)
    total = sum(float(results[s].get("seconds", 0.0)) for s in seeds)
    lines += ["", f"{len(seeds)} seeds in {total:.0f} s of wall time (this report {seconds:.0f} s); load {_load()}."]
    return lines


def _minus(left: list[float | None], right: list[Any]) -> list[float | None]:
    return [None if a is None or b is None else float(a) - float(b) for a, b in zip(left, right, strict=True)]


def goals(entries: dict[str, list[dict[str, Any]]], prm_tests: list[Any], n: str) -> list[str]:
    """Each goal of the study, per seed, against its number."""
    pick = [_pick("PRM", entry, n)[0] for entry in entries["PRM"]]
    weighted = [_get(r, "best_of_n", n, "weighted") for r in prm_tests]
    majority = [_get(r, "best_of_n", n, "majority") for r in prm_tests]
    best = [max(v for v in (a, b) if v is not None) if a is not None or b is not None else None
            for a, b in zip(pick, weighted, strict=True)]  # fmt: skip
    f1 = [_get(r, "first_error", "f1") for r in prm_tests]
    prior = [_get(r, "first_error_baselines", "random_at_prior", "f1") for r in prm_tests]
    orm = [_pick("ORM, equal solutions", entry, n)[0] for entry in entries["ORM, equal solutions"]]

    def seeds_line(values: list[float | None]) -> str:
        return " / ".join(_fmt(v) for v in values)

    def met(flag: bool) -> str:
        return "**met**" if flag else "**not met**"

    beats = all(b is not None and m is not None and b >= m for b, m in zip(best, majority, strict=True))
    aurocs = [_get(r, "step_auroc") for r in prm_tests]
    f1_ok = all(f is not None and f >= 0.30 for f in f1)
    above_prior = all(f is not None and p is not None and f > p for f, p in zip(f1, prior, strict=True))
    return [
        "Against the goals (PRM, per seed):",
        "",
        f"- best-of-{n}, the better of its pick and its weighted vote, against majority: {seeds_line(best)} against "
        f"{seeds_line(majority)}: {met(beats)} on every seed.",
        f"- step AUROC ≥ 0.80: {seeds_line(aurocs)}: {met(all(a is not None and a >= 0.80 for a in aurocs))}.",
        f"- first-error F1 ≥ 0.30 on every seed: {seeds_line(f1)}: {met(f1_ok)}; above random at the prior "
        f"({seeds_line(prior)}): {met(above_prior)}.",
        f"- PRM against ORM at equal labeled solutions, best-of-{n} pick: {seeds_line(pick)} against "
        f"{seeds_line(orm)}; difference {_cell(_minus(pick, orm))} (mean over seeds [95% t-interval]).",
    ]


def _interval(holder: dict[str, Any] | None, key: str) -> str:
    value = (holder or {}).get(key)
    if not isinstance(value, list | tuple) or len(value) != 2 or value[0] is None:
        return ""
    return f"[{value[0]:.3f}, {value[1]:.3f}]"


def write_docs(lines: list[str], args: argparse.Namespace) -> None:
    import re

    begin, end = f"<!-- {args.docs_block}:begin -->", f"<!-- {args.docs_block}:end -->"
    options = [f"--train-option {option}" for option in args.train_option]
    if args.workdir.resolve() != (ROOT / "var" / "prm-champ-seeds").resolve():
        options.append(f"--workdir {args.workdir}")
    command = " ".join(
        ["python benchmarks/prm_champ.py --seeds", *(str(s) for s in args.seeds), *(["--curve"] if args.curve else []),
         *options]
    )  # fmt: skip
    block = "\n".join([begin, f"`{command}`", "", *lines, end])
    text = STUDY_DOC.read_text()
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    STUDY_DOC.write_text(
        pattern.sub(lambda _: block, text) if pattern.search(text) else f"{text.rstrip()}\n\n{block}\n"
    )


def curve_table(results: dict[str, Any], seeds: list[str], n: str) -> list[str]:
    """Metric against labeled solutions, human (PRM) and outcome (ORM), mean over seeds."""
    if not all(any(name.startswith("curve:") for name in results[seed]["arms"]) for seed in seeds):
        return []
    points: list[tuple[str, str]] = [
        *[("PRM (human step labels)", f"curve: PRM on {share:.0%} of the training problems") for share in CURVE_SHARES],
        ("PRM (human step labels)", "PRM"),
        *[("ORM (grader's outcome labels)", f"curve: ORM on {count} graded solutions") for count in CURVE_OUTCOME[:1]],
        ("ORM (grader's outcome labels)", "ORM, equal solutions"),
        *[("ORM (grader's outcome labels)", f"curve: ORM on {count} graded solutions") for count in CURVE_OUTCOME[1:]],
        ("ORM (grader's outcome labels)", "ORM, whole pool"),
    ]
    lines = [
        "",
        "Learning curves (test split, mean over seeds [95% t-interval]): each point is a checkpoint trained on that "
        "many labeled solutions, human step labels for the PRM, the grader's verdicts for the ORM. A PRM's pick uses "
        "its checkpoint's aggregation, chosen in training on the validation problems' graded pool as above.",
        "",
        f"| labels | solutions (mean) | step AUROC | first-error F1 | best-of-{n}: pick (checkpoint's aggregation) "
        f"| pick - majority | weighted - majority |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, arm in points:
        entries = [results[seed]["arms"].get(arm) or {} for seed in seeds]
        tests = [entry.get("test") for entry in entries]
        key = "train_outcome_solutions" if "ORM" in kind else "train_solutions"
        solutions = [float((entry.get("metrics") or {}).get(key) or 0) for entry in entries]
        pick = [_get(r, "best_of_n", n, "prm") for r in tests]
        majority = [_get(r, "best_of_n", n, "majority") for r in tests]
        diff = [None if a is None or b is None else a - b for a, b in zip(pick, majority, strict=True)]
        weighted = [_get(r, "best_of_n", n, "weighted_minus_majority") for r in tests]
        lines.append(
            f"| {kind} | {sum(solutions) / len(solutions):.0f} | {_cell([_get(r, 'step_auroc') for r in tests])} | "
            f"{_cell([_get(r, 'first_error', 'f1') for r in tests])} | {_cell(pick)} | {_cell(diff)} | "
            f"{_cell(weighted)} |"
        )
    return lines
