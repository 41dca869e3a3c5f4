import re
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

DOC = "docs/active-learning.md"
BEGIN, END = "<!-- campaign:begin -->", "<!-- campaign:end -->"


class Command(BaseCommand):
    help = (
        "Simulate labeling campaigns on the synthetic domain (activelearn.simulation.campaign): convincing "
        "wrong-answer selection against uniform selection, same seeds. Arguments after -- go to the simulator "
        "(python -m activelearn.simulation.campaign --help). --write-docs puts the table and plot in "
        f"{DOC}."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--out", type=Path, default=None, help="report directory (default VAR_DIR/simulation)")
        parser.add_argument("--write-docs", action="store_true", help=f"copy the table and plot into {DOC}")
        parser.add_argument("simulator_args", nargs="*", help="simulator arguments, e.g. -- --seeds 0 1 --fixed-pool")

    def handle(self, *args: Any, **options: Any) -> None:
        from activelearn.simulation.campaign import main

        out: Path = options["out"] or Path(settings.VAR_DIR) / "simulation"
        forwarded: list[str] = list(options["simulator_args"])
        if "--backbone-cache" not in forwarded:
            # The pretrained sim: backbones live under this deployment's VAR_DIR, so every
            # campaign run from here reuses the one pretraining.
            forwarded += ["--backbone-cache", str(Path(settings.VAR_DIR) / "simulation" / "backbones")]
        code = main([*forwarded, "--out", str(out)])
        if code:
            raise CommandError(f"the simulation exited with status {code}")
        if options["write_docs"]:
            self._write_docs(out)
        self.stdout.write(f"report in {out}")

    def _write_docs(self, out: Path) -> None:
        table, plot = out / "campaign.md", out / "campaign.png"
        if not table.is_file():
            raise CommandError(f"no report at {table}")
        docs = Path(settings.BASE_DIR) / DOC
        image = Path(settings.BASE_DIR) / "docs" / "img" / "campaign.png"
        section = [BEGIN, table.read_text().strip()]
        if plot.is_file():
            image.write_bytes(plot.read_bytes())
            section.append("\n![labels vs metric, convincing vs uniform](img/campaign.png)")
        section.append(END)
        text = docs.read_text()
        block = "\n".join(section)
        pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
        docs.write_text(pattern.sub(lambda _: block, text) if pattern.search(text) else f"{text.rstrip()}\n\n{block}\n")
