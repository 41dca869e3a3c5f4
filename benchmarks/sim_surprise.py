"""Does the simulated generator's own LM find its errors surprising?

The paper's regime needs a generator whose errors are probable under it: a label-free
reading of the LM (its summed surprise at a step's tokens) should then rank wrong steps
near chance, and labels teach the PRM what pretraining does not. This pretrains the
home generator's LM (``sim:home``'s size, ``activelearn.simulation.backbone``) at each
``--schedule`` (steps:corpus problems) on that generator's samples, and prints the step
AUROC of the surprise on ``--problems`` fresh problems x ``--samples``:

* over every rated step, as the study's baseline (a neutral filler step counts as not
  wrong), and over the computation and answer steps only;
* per misconception: its wrong steps against every right step, against the right steps
  at the same kind of event, and against those in the misconception's home settings
  (where the generator holds it nine times in ten: below 0.5 means the LM expects the
  misconception there more than the rule).

Pretrained backbones are cached (``--cache``); the schedule ``sim:home`` uses is one of
the defaults, so that row costs nothing once a study has run.

    python benchmarks/sim_surprise.py
    python benchmarks/sim_surprise.py --schedule 800:2000 4800:10000 --problems 600
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _schedule(text: str) -> tuple[int, int]:
    steps, _, problems = text.partition(":")
    try:
        return int(steps), int(problems)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--schedule {text!r}: expected STEPS:PROBLEMS, e.g. 4800:10000") from None


def measure(steps: int, corpus_problems: int, problems: int, samples: int, cache: Path) -> dict[str, Any]:
    from activelearn.prm.evaluation import auroc
    from activelearn.prm.head_training import step_surprises
    from activelearn.prm.modeling import ProcessRewardModel
    from activelearn.simulation.backbone import SIM_BACKBONES, pretrained_backbone
    from activelearn.simulation.domain import MISCONCEPTIONS, generate_problems, problem_texts, sample_solutions
    from activelearn.simulation.oracle import OracleLabeler

    home = SIM_BACKBONES["home"]
    domain = home.domain
    config = replace(home, max_steps=steps, corpus_problems=corpus_problems)
    backbone = pretrained_backbone(config, cache)
    # Their own seed stream: neither the corpus's nor any campaign's problems.
    held_out = generate_problems(problems, 777, domain, prefix="surprise")
    texts = problem_texts(held_out)
    by_id = {p.problem_id: p for p in held_out}
    solutions = [s for p in held_out for s in sample_solutions(p, samples, 777, domain, "")]
    oracle = OracleLabeler()
    labeled = [oracle.label(texts[s.problem_id], s) for s in solutions]
    model, tokenizer = ProcessRewardModel.from_backbone(str(backbone.directory), step_features=["surprise"])
    surprise, fine = step_surprises(model, tokenizer, labeled)
    # The oracle's labels stop at the first wrong step; the surprises come in that order.
    steps_rated = [(s, s.steps[i]) for s, one in zip(solutions, labeled, strict=True) for i in range(len(one.steps))]
    assert len(steps_rated) == len(surprise)
    rated = [(x, s, g) for x, (s, g) in zip(surprise, steps_rated, strict=True) if g.kind != "filler"]

    def area(wrong: list[float], right: list[float]) -> float | None:
        if not wrong or not right:
            return None
        return auroc([-v for v in wrong + right], [False] * len(wrong) + [True] * len(right))

    right = [x for x, _, g in rated if g.is_correct]
    result: dict[str, Any] = {
        "steps": steps,
        "corpus_problems": corpus_problems,
        "final_loss": backbone.final_loss,
        # As the study's baseline and every step AUROC here: a neutral filler is not wrong.
        "every_step": auroc([-x for x in surprise], fine),
        "overall": area([x for x, _, g in rated if not g.is_correct], right),
        "misconceptions": {},
    }
    for rule in MISCONCEPTIONS:
        if rule.name not in (domain.held_misconceptions or ()):
            continue
        wrong = [x for x, _, g in rated if not g.is_correct and g.misconception == rule.name]
        same_event = [
            (x, by_id[s.problem_id].setting)
            for x, s, g in rated
            if g.is_correct and g.plan_index is not None and by_id[s.problem_id].plan[g.plan_index].event == rule.event
        ]
        result["misconceptions"][rule.name] = {
            "wrong_steps": len(wrong),
            "vs_every_right_step": area(wrong, right),
            "vs_same_event": area(wrong, [x for x, _ in same_event]),
            "vs_same_event_at_home": area(wrong, [x for x, setting in same_event if setting in rule.home]),
        }
    return result


def _cell(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--schedule", type=_schedule, nargs="+", default=[(800, 2000), (2400, 6000), (4800, 10000)], metavar="S:P"
    )
    parser.add_argument("--problems", type=int, default=300)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--cache", type=Path, default=Path("var/simulation/backbones"))
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    rows = []
    for steps, corpus in args.schedule:
        started = time.monotonic()
        rows.append(measure(steps, corpus, args.problems, args.samples, args.cache))
        rows[-1]["seconds"] = time.monotonic() - started
        print(f"schedule {steps}:{corpus} done in {rows[-1]['seconds']:.0f} s", file=sys.stderr, flush=True)
    names = list(rows[0]["misconceptions"])
    print(f"Label-free surprise, step AUROC ({args.problems} fresh problems x {args.samples}; random 0.500):\n")
    print(
        "| pretraining steps | corpus problems | final LM loss | every step | without fillers | "
        + " | ".join(f"`{n}`: all right / same event / same event at home" for n in names)
        + " |"
    )
    print("|---:|---:|---:|---:|---:|" + "---|" * len(names))
    for row in rows:
        cells = [
            " / ".join(
                _cell(row["misconceptions"][n][k])
                for k in ("vs_every_right_step", "vs_same_event", "vs_same_event_at_home")
            )
            for n in names
        ]
        print(
            f"| {row['steps']} | {row['corpus_problems']} | {row['final_loss']:.3f} | {_cell(row['every_step'])} | "
            f"{_cell(row['overall'])} | " + " | ".join(cells) + " |"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
