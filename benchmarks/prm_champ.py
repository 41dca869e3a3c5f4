"""The PRM on real data: CHAMP, with the product's own commands, against its baselines.

CHAMP (the ``champ-dataset`` package) has 270 competition problems, 72 recorded model
conversations per problem, and for two of them per problem a human annotation of the
first wrong step (540 labeled solutions). This script runs, in a fresh SQLite database,
what a researcher runs:

1. ``load_demo --solutions-per-problem 0`` (the problems) and ``split_problems`` (the
   seeded train / validation / test split of problems);
2. ``import_prm800k`` of the human labels, written here as PRM800K records: steps are
   the demo's one-per-line steps, every step before the annotated one is +1, the
   annotated one is -1 and ends the record (``found_error``); an annotation of "no
   mistake" is a record of +1 steps (``solution``);
3. ``import_solutions`` of the unlabeled pool: up to ``--pool`` other conversations per
   test problem (the two labeled ones are not in it);
4. ``train_prm --split train --validation-split validation`` (timed);
5. ``score_solutions --split test`` and answer grading (``--grader product``:
   ``grade_solutions``; ``--grader lenient-numeric``: only problems whose answer is a
   number, compared as numbers, the rest left ungraded: a grader that only compares numbers);
6. ``evaluate_prm --split validation`` and ``--split test``.

It prints one table (and with ``--write-docs`` puts it in docs/prm.md between the
``champ`` markers): step AUROC, first-error F1 with its baselines, best-of-N with
PRM-min, PRM-product, the chosen aggregation, weighted vote, majority, random and oracle,
and the wall time of every command with the load average beside it.

    python benchmarks/prm_champ.py --workdir var/prm-champ --write-docs
    python benchmarks/prm_champ.py --backbone builtin:smollm2 --train-option freeze_layers=99
    python benchmarks/prm_champ.py --learning-curve 0.25 0.5 1.0   # labeled solutions vs metric
    python benchmarks/prm_champ.py --curve-only --learning-curve 0.25 0.5 1.0   # after a full run

The database in ``--workdir`` is deleted and recreated.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "prm.md"
BEGIN, END = "<!-- champ:begin -->", "<!-- champ:end -->"
NUMBER = re.compile(r"^-?\d+(?:\.\d+)?(?:/\d+)?$")


def _env(workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["DATABASE_URL"] = f"sqlite:///{workdir / 'db.sqlite3'}"
    env.setdefault("CHECKPOINT_DIR", str(workdir / "checkpoints"))
    env["PYTHONUNBUFFERED"] = "1"
    return env


CPU_SECONDS: dict[str, float] = {}


def _manage(env: dict[str, str], *args: str) -> tuple[str, float]:
    started = time.monotonic()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args], env=env, cwd=ROOT, capture_output=True, text=True
    )
    elapsed = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU seconds used by the command: on a shared machine a fairer cost than wall time.
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    CPU_SECONDS[args[0]] = CPU_SECONDS.get(args[0], 0.0) + cpu
    if done.returncode:
        raise SystemExit(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    print(f"  {' '.join(args[:3])}: {elapsed:.0f}s wall, {cpu:.0f} CPU-s (load {_load()})", file=sys.stderr)
    for line in done.stdout.splitlines():
        if line.startswith("epoch ") or line.startswith("checkpoint "):
            print(f"    {line}", file=sys.stderr)
    return done.stdout, elapsed


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def _django(env: dict[str, str]) -> None:
    os.environ.update({k: env[k] for k in ("DATABASE_URL", "CHECKPOINT_DIR")})
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "annotate.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def champ_records(problems: dict[str, Any]) -> tuple[list[dict[str, Any]], set[tuple[str, str]]]:
    """PRM800K records of CHAMP's first-wrong-step annotations, and their (problem, conversation) keys."""
    import champ_dataset

    from activelearn.grading import extract_final_answer
    from labeling.data.demo import UNIQUE_ID_PREFIX, first_wrong_step
    from mathtext.splitting import split_steps

    dataset = champ_dataset.load("v0")
    records: list[dict[str, Any]] = []
    labeled: set[tuple[str, str]] = set()
    for identifier, item in dataset.problems.items():
        row = problems.get(f"{UNIQUE_ID_PREFIX}{identifier}")
        if row is None:
            continue
        for conversation, annotation in (item.fws_annotations or {}).items():
            steps = split_steps(annotation.text)
            if not steps:
                continue
            wrong = first_wrong_step(annotation.text, steps, annotation.start_idx)
            label_steps = []
            for index, text in enumerate(steps):
                bad = index == wrong
                label_steps.append(
                    {
                        "completions": [{"text": text, "rating": -1 if bad else 1, "flagged": None}],
                        "human_completion": None,
                        "chosen_completion": None if bad else 0,
                    }
                )
                if bad:
                    break
            records.append(
                {
                    "labeler": str(uuid.uuid5(uuid.NAMESPACE_URL, f"champ-author:{annotation.author}")),
                    "timestamp": "2024-01-01T00:00:00",
                    "generation": 0,
                    "is_quality_control_question": False,
                    "is_initial_screening_question": False,
                    "question": {
                        "problem": row["problem"],
                        "ground_truth_solution": row["solution"],
                        "ground_truth_answer": row["answer"],
                        "pre_generated_steps": steps,
                        "pre_generated_answer": extract_final_answer("\n".join(steps)) or "",
                        "pre_generated_verifier_score": 0.0,
                    },
                    "label": {
                        "steps": label_steps,
                        "total_time": 0,
                        "finish_reason": "found_error" if wrong is not None else "solution",
                    },
                }
            )
            labeled.add((f"{UNIQUE_ID_PREFIX}{identifier}", conversation))
    return records, labeled


def champ_pool(
    problem_ids: set[str], labeled: set[tuple[str, str]], per_problem: int, problems: dict[str, Any],
    records: list[dict[str, Any]],
) -> list[dict[str, Any]]:  # fmt: skip
    """Up to ``per_problem`` unlabeled conversations per problem, in the demo's serving order.

    A conversation whose steps are the steps of a labeled record is left out here, not
    by ``evaluate_prm`` later: CHAMP's models often wrote the same text under several
    conditions, and a pool filled with copies of the labeled two would leave best-of-16
    with too few candidates per problem.
    """
    from labeling.data.demo import read_champ

    uid_of_problem = {row["problem"]: uid for uid, row in problems.items()}
    labeled_steps: dict[str, set[tuple[str, ...]]] = {}
    for record in records:
        uid = uid_of_problem[record["question"]["problem"]]
        labeled_steps.setdefault(uid, set()).add(tuple(record["question"]["pre_generated_steps"]))
    rows: list[dict[str, Any]] = []
    for problem in read_champ(solutions_per_problem=None):
        if problem.unique_id not in problem_ids:
            continue
        taken = 0
        for solution in problem.solutions:
            if taken >= per_problem:
                break
            if (problem.unique_id, solution.conversation) in labeled:
                continue
            if tuple(solution.steps) in labeled_steps.get(problem.unique_id, set()):
                continue
            rows.append(
                {
                    "problem_id": problem.unique_id,
                    "steps": solution.steps,
                    "answer": solution.final_answer,
                    "model": solution.source_model,
                }
            )
            taken += 1
    return rows


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    cleaned = re.sub(r"\\[a-z]+\{([^}]*)\}", r"\1", text).replace("$", "").replace(",", "").strip()
    cleaned = cleaned.replace("\\!", "").rstrip(".")
    if not NUMBER.match(cleaned):
        return None
    if "/" in cleaned:
        top, bottom = cleaned.split("/")
        return float(top) / float(bottom) if float(bottom) else None
    return float(cleaned)


def grade_lenient_numeric(split: str) -> dict[str, int]:
    """Problems with a numeric reference answer: the solution is right when its last number equals it."""
    from labeling.models import Solution

    counts = {"graded": 0, "correct": 0, "non_numeric_problems_left_ungraded": 0}
    updates: dict[bool, list[int]] = {True: [], False: []}
    problems_left: set[int] = set()
    for pk, problem_id, answer, final_answer, steps in (
        Solution.objects.with_steps()
        .filter(problem__split=split)
        .values_list("pk", "problem_id", "problem__answer", "final_answer", "steps")
    ):
        reference = _number(answer)
        if reference is None:
            problems_left.add(problem_id)
            continue
        candidates = re.findall(r"-?\d[\d,]*(?:\.\d+)?", final_answer or (steps or [""])[-1])
        value = _number(candidates[-1]) if candidates else None
        correct = value is not None and abs(value - reference) <= 1e-6 * max(1.0, abs(reference))
        updates[correct].append(pk)
        counts["graded"] += 1
        counts["correct"] += correct
    for correct, pks in updates.items():
        Solution.objects.filter(pk__in=pks).update(is_correct=correct, grading_note="lenient-numeric (benchmark)")
    counts["non_numeric_problems_left_ungraded"] = len(problems_left)
    return counts


def _fmt(value: Any) -> str:
    return "—" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def table(results: dict[str, dict[str, Any]]) -> list[str]:
    lines = [
        "| held out | labeled solutions | step AUROC (chance 0.5) | first-error F1 | error / error-free accuracy "
        "| F1 always-no-error | F1 random at prior |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        fe, base = r.get("first_error") or {}, r.get("first_error_baselines") or {}
        lines.append(
            f"| {name} | {r['labeled_solutions']} | {_fmt(r['step_auroc'])} | {_fmt(fe.get('f1'))} | "
            f"{_fmt(fe.get('error_accuracy'))} / {_fmt(fe.get('correct_accuracy'))} | "
            f"{_fmt((base.get('always_no_error') or {}).get('f1'))} | "
            f"{_fmt((base.get('random_at_prior') or {}).get('f1'))} |"
        )
    test = results.get("test")
    if test and test["best_of_n"]:
        lines += [
            "",
            f"Best-of-N on the test problems' unlabeled pool (aggregation chosen on validation: "
            f"`{test['aggregation']}`; pool: {json.dumps(test['pool'])}):",
            "",
            "| N | problems (skipped) | PRM (chosen) | PRM-min | PRM-product | PRM-weighted vote | majority vote "
            "| random | oracle |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for n, row in test["best_of_n"].items():
            lines.append(
                f"| {n} | {row['problems']} ({row['skipped']}) | {_fmt(row['prm'])} | {_fmt(row['prm_min'])} | "
                f"{_fmt(row['prm_product'])} | {_fmt(row['weighted'])} | {_fmt(row['majority'])} | "
                f"{_fmt(row['random'])} | {_fmt(row['oracle'])} |"
            )
    return lines


def _evaluate(env: dict[str, str], splits: list[str], sizes: list[int]) -> tuple[dict[str, dict[str, Any]], float]:
    """``evaluate_prm`` of each split, run side by side: each one scores its labeled prefixes."""
    started = time.monotonic()
    command = [sys.executable, str(ROOT / "manage.py"), "evaluate_prm", *[f"--n={n}" for n in sizes]]
    running = {
        split: subprocess.Popen(
            [*command, f"--split={split}"], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for split in splits
    }
    results: dict[str, dict[str, Any]] = {}
    for split, process in running.items():
        out, err = process.communicate()
        if process.returncode:
            raise SystemExit(f"manage.py evaluate_prm --split={split} failed:\n{out}\n{err}")
        results[split] = json.loads(out)
    elapsed = time.monotonic() - started
    print(f"  evaluate_prm {' '.join(splits)}: {elapsed:.0f}s wall (load {_load()})", file=sys.stderr)
    return results, elapsed


def surprise_baselines(backbones: dict[str, str], max_length: int | None) -> list[str]:
    """The label-free baseline of each backbone: held-out step AUROC of its LM's summed
    surprise at each step (needs a tied causal LM; ``head_training.surprise_step_auroc``)."""
    from activelearn.checkpoints.training_data import TrainingDataFilters, labeled_solutions_list
    from activelearn.prm.head_training import surprise_step_aurocs

    labeled = [labeled_solutions_list(filters=TrainingDataFilters(splits=(split,))) for split in ("validation", "test")]
    rows = ["| backbone | val step AUROC of the LM's surprise, no labels | test |", "|---|---|---|"]
    for name, spec in backbones.items():
        values = surprise_step_aurocs(spec, labeled, max_length=max_length)
        rows.append(f"| {name} | " + " | ".join(_fmt(v) for v in values) + " |")
    return rows


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if any(a == "--seeds" or a.startswith("--seeds=") for a in arguments):
        # Several split seeds: one shared database, every arm per seed (prm_champ_seeds).
        sys.path.insert(0, str(ROOT))
        from benchmarks.prm_champ_seeds import main as seeds_main

        return seeds_main(arguments)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=ROOT / "var" / "prm-champ")
    parser.add_argument("--backbone", default="builtin:minilm")
    parser.add_argument("--seed", type=int, default=0, help="split_problems seed")
    parser.add_argument("--validation", type=float, default=0.2)
    parser.add_argument("--test", type=float, default=0.2)
    # 20, not 16: a conversation graded "no answer found" leaves the best-of-N pool, and a
    # problem left with fewer than N candidates is skipped at that N.
    parser.add_argument("--pool", type=int, default=20, help="unlabeled conversations per test problem")
    parser.add_argument(
        "--pool-numeric-only",
        action="store_true",
        help="pool only for test problems with a numeric answer (what the lenient grader can grade)",
    )
    parser.add_argument("--n", type=int, action="append", help="best-of-N sizes (default 1 4 16)")
    parser.add_argument("--grader", choices=["product", "lenient-numeric"], default="product")
    parser.add_argument("--train-option", action="append", default=[], metavar="KEY=VALUE", help="train_prm --KEY")
    parser.add_argument(
        "--learning-curve", type=float, nargs="*", help="also train on these shares of the training problems"
    )
    parser.add_argument(
        "--curve-only", action="store_true", help="only the learning curve, on the database of a full run in --workdir"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the database and newest checkpoint in --workdir: score what is unscored, grade, evaluate",
    )
    parser.add_argument(
        "--skip-scoring",
        action="store_true",
        help="with --resume: evaluate with what is scored; evaluate_prm counts the unscored rest as left out",
    )
    parser.add_argument(
        "--adapt-steps",
        type=int,
        default=0,
        help="first continue the backbone's LM training this many steps on unlabeled train-problem solutions",
    )
    parser.add_argument("--adapt-pool", type=int, default=4, help="unlabeled conversations per train problem")
    parser.add_argument("--adapt-option", action="append", default=[], metavar="KEY=VALUE", help="adapt_backbone --KEY")
    parser.add_argument(
        "--surprise-only",
        action="store_true",
        help="only the label-free surprise baseline of --backbone (and of --workdir's adapted backbone, if any)",
    )
    parser.add_argument("--write-docs", action="store_true", help=f"put the table in {DOC.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    sizes = args.n or [1, 4, 16]
    if args.skip_scoring and not args.resume:
        parser.error("--skip-scoring needs --resume")

    workdir = args.workdir.resolve()
    if args.curve_only:
        _django(_env(workdir))
        started = time.monotonic()
        lines = _learning_curve(args, args.learning_curve or [0.25, 0.5, 1.0])
        lines.append(f"\n({time.monotonic() - started:.0f}s, load average {_load()})")
        print("\n".join(lines))
        (workdir / "curve.md").write_text("\n".join(lines) + "\n")
        return 0
    if args.surprise_only:
        _django(_env(workdir))
        print("\n".join(surprise_baselines(_surprise_backbones(args, workdir), None)))
        return 0
    workdir.mkdir(parents=True, exist_ok=True)
    if not args.resume:
        (workdir / "db.sqlite3").unlink(missing_ok=True)
    env = _env(workdir)
    print(f"CHAMP PRM benchmark in {workdir} (load {_load()})", file=sys.stderr)
    if not args.resume:
        _manage(env, "migrate", "--no-input")
        _manage(env, "load_demo", "--solutions-per-problem=0")
        _manage(
            env, "split_problems", "--prefix=champ/", f"--seed={args.seed}", f"--validation={args.validation}",
            f"--test={args.test}",
        )  # fmt: skip
    _django(env)
    from labeling.models import Problem

    problems = {
        uid: {"problem": text, "solution": solution, "answer": answer, "split": split}
        for uid, text, solution, answer, split in Problem.objects.filter(unique_id__startswith="champ/").values_list(
            "unique_id", "problem", "solution", "answer", "split"
        )
    }
    test_problems = {uid for uid, row in problems.items() if row["split"] == "test"}
    from activelearn.models import PRMCheckpoint

    adapt_out = ""  # continued LM training's last line; a resumed run did none
    if args.resume:
        # A run interrupted while scoring (or scored by hand, in parallel id ranges):
        # its checkpoint and whatever it scored stay; only the unscored rest is scored.
        resumed = PRMCheckpoint.objects.filter(status="ready").order_by("-id").first()
        if resumed is None:
            raise SystemExit(f"--resume: no ready checkpoint in {workdir / 'db.sqlite3'}")
        train_out = "\n".join(f"epoch {e['epoch']}: val step AUROC {e['val_auroc']}" for e in resumed.metrics["epochs"])
        train_s = float(resumed.duration_s or 0.0)
    else:
        records, labeled = champ_records(problems)
        labels_file = workdir / "champ-labels.jsonl"
        labels_file.write_text("".join(json.dumps(r) + "\n" for r in records))
        _manage(env, "import_prm800k", str(labels_file))
        numeric = {uid for uid in test_problems if _number(problems[uid]["answer"]) is not None}
        pooled = numeric if args.pool_numeric_only else test_problems
        pool_file = workdir / "champ-pool.jsonl"
        pool_file.write_text(
            "".join(json.dumps(r) + "\n" for r in champ_pool(pooled, labeled, args.pool, problems, records))
        )
        _manage(env, "import_solutions", str(pool_file))
        backbone = args.backbone
        if args.adapt_steps:
            # The train problems' own unlabeled conversations (no labels read): continued LM
            # training on them, then the PRM trains on the adapted backbone.
            train_problems = {uid for uid, row in problems.items() if row["split"] == "train"}
            adapt_file = workdir / "champ-train-pool.jsonl"
            adapt_file.write_text(
                "".join(
                    json.dumps(r) + "\n"
                    for r in champ_pool(train_problems, labeled, args.adapt_pool, problems, records)
                )
            )
            _manage(env, "import_solutions", str(adapt_file))
            adapted = workdir / "adapted-backbone"
            adapt_out, _ = _manage(
                env, "adapt_backbone", f"--backbone={args.backbone}", "--split=train", f"--output={adapted}",
                f"--max-steps={args.adapt_steps}", *_options(args.adapt_option),
            )  # fmt: skip
            backbone = str(adapted)

        train_args = _options(args.train_option)
        train_out, train_s = _manage(
            env, "train_prm", f"--backbone={backbone}", "--split=train", "--validation-split=validation",
            "--no-progress", *train_args,
        )  # fmt: skip
    if args.resume and args.skip_scoring:
        score_s = 0.0
    else:
        _, score_s = _manage(env, "score_solutions", "--split=test", "--unscored", "--no-progress")
    if args.grader == "product":
        # Resumed: what an earlier try graded (no answer found included) keeps its verdict.
        resumed_only = ["--ungraded"] if args.resume else []
        _, grade_s = _manage(env, "grade_solutions", "--split=test", *resumed_only, "--no-progress")
        grading = "product grader (`grade_solutions`)"
    else:
        started = time.monotonic()
        counts = grade_lenient_numeric("test")
        grade_s = time.monotonic() - started
        grading = f"lenient numeric grader, numeric-answer problems only ({json.dumps(counts)})"
    results, evaluate_s = _evaluate(env, ["validation", "test"], sizes)

    checkpoint = PRMCheckpoint.objects.order_by("-id").first()
    assert checkpoint is not None
    curve: list[str] = []
    if args.learning_curve:
        curve = _learning_curve(args, args.learning_curve)
    lines = [
        f"Backbone `{args.backbone}` ({json.dumps(checkpoint.hyperparameters.get('resolved', {}).get('freeze_layers'))}"
        f" frozen layers, lr {checkpoint.hyperparameters.get('resolved', {}).get('learning_rate')}, "
        f"{checkpoint.hyperparameters.get('resolved', {}).get('num_epochs')} epochs, max length "
        f"{checkpoint.hyperparameters.get('resolved', {}).get('max_length')}); split seed {args.seed} "
        f"(train / validation / test problems: "
        f"{sum(r['split'] == 'train' for r in problems.values())} / "
        f"{sum(r['split'] == 'validation' for r in problems.values())} / {len(test_problems)}); "
        f"{checkpoint.metrics.get('train_solutions')} train and {checkpoint.metrics.get('validation_solutions')} "
        f"validation labeled solutions; threshold {_fmt(checkpoint.threshold)} and aggregation "
        f"`{checkpoint.aggregation or 'min'}` chosen on validation; {grading}.",
        "",
        *table(results),
        "",
        (
            f"Wall time on this machine (2 cores, shared): train_prm {train_s:.0f}s (as the checkpoint recorded it), "
            + (
                "the rest of the pool left unscored (--skip-scoring; see the pool counts)"
                if args.skip_scoring
                else f"score_solutions of what was left unscored {score_s:.0f}s"
            )
            if args.resume
            else f"Wall time on this machine (2 cores, shared): train_prm {train_s:.0f}s "
            f"({CPU_SECONDS.get('train_prm', 0):.0f} CPU-s), score_solutions of the test pool {score_s:.0f}s "
            f"({CPU_SECONDS.get('score_solutions', 0):.0f} CPU-s)"
        )
        + f", grading {grade_s:.0f}s, evaluate_prm of the validation and test splits side by side {evaluate_s:.0f}s; "
        f"load average at the end {_load()}. Last epoch: {_last_epoch(train_out)}",
        *curve,
    ]
    if "surprise" in " ".join(args.train_option) or adapt_out:
        lines += ["", *surprise_baselines(_surprise_backbones(args, workdir), None)]
    if adapt_out:
        lines[1:1] = [
            "",
            f"Backbone adapted first (`adapt_backbone`, {CPU_SECONDS.get('adapt_backbone', 0):.0f} CPU-s): "
            + adapt_out.strip().splitlines()[-1],
        ]
    print("\n".join(lines))
    (workdir / "report.md").write_text("\n".join(lines) + "\n")
    (workdir / "results.json").write_text(json.dumps(results, indent=2))
    if args.write_docs:
        _write_docs(lines, args)
    return 0


def _surprise_backbones(args: argparse.Namespace, workdir: Path) -> dict[str, str]:
    backbones = {f"`{args.backbone}`": args.backbone}
    if (workdir / "adapted-backbone" / "config.json").is_file():
        backbones[f"`{args.backbone}` adapted (`adapt_backbone`)"] = str(workdir / "adapted-backbone")
    return backbones


def _options(items: list[str]) -> list[str]:
    """``key_name=value`` items as ``--key-name=value`` arguments."""
    return [f"--{item.split('=', 1)[0].replace('_', '-')}={item.split('=', 1)[1]}" for item in items]


def _last_epoch(train_out: str) -> str:
    epochs = [line for line in train_out.splitlines() if line.startswith("epoch ")]
    return epochs[-1] if epochs else "n/a"


def _learning_curve(args: argparse.Namespace, shares: list[float]) -> list[str]:
    """Step AUROC and first-error F1 against the number of labeled training solutions.

    The backbone's features are computed once for the train, validation and test labels
    (the default recipe trains only the head on them), then a head is fitted on growing
    shares of the training problems (a fixed seeded order), with the threshold chosen on
    validation each time, as ``train_prm`` would. Best-of-N is left out: it would need the
    pool scored again per point.
    """
    import hashlib

    import torch

    from activelearn.checkpoints.training_data import TrainingDataFilters, labeled_solutions_list
    from activelearn.prm.batching import encode_examples
    from activelearn.prm.data import build_examples, trajectory_with_first_error
    from activelearn.prm.evaluation import auroc, first_error_metrics, prior_threshold
    from activelearn.prm.freezing import freeze_lower_layers
    from activelearn.prm.head_training import fit_head, separator_features
    from activelearn.prm.modeling import ProcessRewardModel
    from activelearn.prm.training import TrainConfig

    config = TrainConfig(output_dir=Path("."), backbone=args.backbone).resolved()
    assert config.learning_rate is not None and config.num_epochs is not None
    torch.manual_seed(0)
    model, tokenizer = ProcessRewardModel.from_backbone(args.backbone, max_length=config.max_length)
    freeze_lower_layers(model, 10_000)
    encoder = model.step_encoder(tokenizer)
    parts = {
        split: labeled_solutions_list(filters=TrainingDataFilters(splits=(split,)))
        for split in ("train", "validation", "test")
    }
    # CHAMP labels have no alternatives: a solution's feature rows are its trajectory's
    # steps in order (the chosen path, then the error step), so they split back by length.
    sequences = {split: encode_examples(encoder, build_examples(items)) for split, items in parts.items()}
    features = {
        split: separator_features(model, seqs, encoder.pad_id, torch.device("cpu")) for split, seqs in sequences.items()
    }
    order = sorted(
        {s.problem_id for s in parts["train"]}, key=lambda uid: hashlib.sha256(f"curve:{uid}".encode()).hexdigest()
    )

    def scores(split: str) -> list[float]:
        with torch.no_grad():
            return (1.0 - torch.softmax(model.head(features[split].vectors), dim=-1)[:, 0]).tolist()

    def per_solution(split: str, values: list[float]) -> list[list[float]]:
        lengths = [len(trajectory_with_first_error(item)[0]) for item in parts[split]]
        out, cursor = [], 0
        for length in lengths:
            out.append(values[cursor : cursor + length])
            cursor += length
        return out

    firsts = {split: [trajectory_with_first_error(item)[1] for item in items] for split, items in parts.items()}
    lines = [
        "",
        "Learning curve of the default recipe (head fitted on growing shares of the training problems; "
        "threshold chosen on validation each time):",
        "",
        "| training problems | labeled solutions | labeled steps | val step AUROC | test step AUROC "
        "| test first-error F1 |",
        "|---|---|---|---|---|---|",
    ]
    for share in shares:
        chosen = set(order[: max(1, round(share * len(order)))])
        mask = torch.tensor(
            [s.problem_id in chosen for s in parts["train"] for _ in range(len(trajectory_with_first_error(s)[0]))]
        )
        subset = type(features["train"])(features["train"].vectors[mask], features["train"].classes[mask])
        counts = torch.bincount(subset.classes, minlength=3).double()
        weights = torch.where(counts > 0, counts.sum() / ((counts > 0).sum() * counts.clamp_min(1)), 0.0).float()
        fit_head(
            model, subset, features["validation"], epochs=config.num_epochs, batch_size=config.batch_size,
            learning_rate=config.learning_rate, weight_decay=config.weight_decay, class_weights=weights, seed=0,
        )  # fmt: skip
        row = {}
        for split in ("validation", "test"):
            values = scores(split)
            fine = (features[split].classes != 0).tolist()
            row[split] = auroc(values, fine)
        threshold, _ = prior_threshold(per_solution("validation", scores("validation")), firsts["validation"])
        test_f1 = first_error_metrics(per_solution("test", scores("test")), firsts["test"], threshold).f1
        lines.append(
            f"| {len(chosen)} | {sum(s.problem_id in chosen for s in parts['train'])} | {len(subset.classes)} | "
            f"{row['validation']:.3f} | {row['test']:.3f} | {test_f1:.3f} |"
        )
    return lines


def shown_command(argv: list[str]) -> str:
    """The command as run, less --write-docs and the machine-local --workdir (either spelling)."""
    shown: list[str] = []
    skip = False
    for argument in argv:
        if skip or argument == "--write-docs" or argument.startswith("--workdir="):
            skip = False
            continue
        if argument == "--workdir":
            skip = True
            continue
        shown.append(argument)
    return " ".join(["python benchmarks/prm_champ.py", *shown])


def _write_docs(lines: list[str], args: argparse.Namespace) -> None:
    command = shown_command(sys.argv[1:])
    block = "\n".join([BEGIN, f"`{command}`", "", *lines, END])
    text = DOC.read_text()
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    DOC.write_text(pattern.sub(lambda _: block, text) if pattern.search(text) else f"{text.rstrip()}\n\n{block}\n")


if __name__ == "__main__":
    raise SystemExit(main())
