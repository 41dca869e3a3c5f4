import json
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from activelearn.management.commands._options import adapt_config, fmt
from activelearn.prm.adaptation import ADAPTATION_FILE, AdaptConfig, adapt_backbone
from activelearn.prm.backbones import BackboneNotFoundError
from activelearn.selection.solutions import solution_texts

# The AdaptConfig fields this command sets, each from the option of its own name.
CONFIG_OPTIONS = ("max_steps", "batch_size", "learning_rate", "train_layers", "max_length", "heldout_share", "seed")


class Command(BaseCommand):
    help = (
        "Continue training a causal-LM backbone as a language model on unlabeled solutions (--split, --problem) "
        "in the PRM's layout, and write it to --output as a local backbone directory for train_prm --backbone. "
        "No label is read. Prints the LM loss on held-out problems' solutions before and after."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        defaults = AdaptConfig()
        parser.add_argument("--backbone", default=None, help=f"backbone spec (default {settings.PRM_BACKBONE})")
        parser.add_argument(
            "--output",
            required=True,
            type=Path,
            help="directory to write (replaced atomically); an existing one must be empty or an earlier output "
            "of this command, unless --replace",
        )
        parser.add_argument(
            "--replace", action="store_true", help="replace --output even if it holds something else (deleted)"
        )
        parser.add_argument("--split", action="append", dest="splits", help="solutions of this Problem.split")
        parser.add_argument("--problem", action="append", dest="problem_ids", help="Problem.unique_id (prefix*)")
        parser.add_argument("--max-steps", type=int, default=defaults.max_steps)
        parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
        parser.add_argument("--learning-rate", type=float, default=defaults.learning_rate)
        parser.add_argument(
            "--train-layers", type=int, default=defaults.train_layers, help="top blocks trained; 0: all"
        )
        parser.add_argument("--max-length", type=int, default=defaults.max_length)
        parser.add_argument("--heldout-share", type=float, default=defaults.heldout_share)
        parser.add_argument("--seed", type=int, default=defaults.seed)

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["replace"]:
            output_check(options["output"])
        rows = solution_texts(splits=options["splits"] or (), problem_ids=options["problem_ids"] or ())
        solutions = [(problem, steps) for problem, steps, _ in rows]
        config = adapt_config(options, {name: name for name in CONFIG_OPTIONS})
        try:
            report = adapt_backbone(
                options["backbone"] or settings.PRM_BACKBONE,
                solutions,
                options["output"],
                config,
                progress=lambda line: self.stderr.write(line),
            )
        except (ValueError, BackboneNotFoundError) as error:
            raise CommandError(str(error)) from None
        self.stdout.write(
            self.style.SUCCESS(
                f"adapted backbone written to {report.directory}: {report.solutions} solutions, "
                f"{report.train_windows} training windows, {report.train_tokens_seen} tokens seen in "
                f"{config.max_steps} steps; held-out LM loss {fmt(report.heldout_loss_before)} -> "
                f"{fmt(report.heldout_loss_after)} ({report.heldout_windows} windows); {report.seconds:.0f}s"
            )
        )


def output_check(output: Path) -> None:
    """Refuse an ``--output`` whose contents the run would delete and that this command did not write.

    The output directory is replaced whole (``atomic_directory``), so pointing it at the wrong
    directory would silently delete it. An earlier output is recognised by the record
    ``adaptation.json`` that every run writes last, with its base model and config.
    """
    if not output.exists():
        return
    if not output.is_dir():
        raise CommandError(f"--output {output} is a file, not a directory; nothing was written")
    if not any(output.iterdir()) or _is_adaptation(output / ADAPTATION_FILE):
        return
    raise CommandError(
        f"--output {output} is not empty and is not an earlier adapt_backbone output (no {ADAPTATION_FILE}); "
        "it would be deleted. Choose another directory, or pass --replace to delete it"
    )


def _is_adaptation(record: Path) -> bool:
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "base_model" in data and isinstance(data.get("config"), dict)
