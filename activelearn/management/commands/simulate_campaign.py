import re
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

DOC = "docs/active-learning.md"
# Which report goes between which markers of the doc, under which image name.
BLOCKS = {
    "campaign": ("<!-- campaign:begin -->", "<!-- campaign:end -->", "labels vs metric, convincing vs uniform"),
    "study": ("<!-- study:begin -->", "<!-- study:end -->", "labels vs metric, every arm of the study"),
    "sweep": ("<!-- sweep:begin -->", "<!-- sweep:end -->", "convincing's data efficiency vs the systematic share"),
    # The study in another domain (``-- --domain misconceptions``) has a block of its own.
    "study-misconceptions": (
        "<!-- study-misconceptions:begin -->",
        "<!-- study-misconceptions:end -->",
        "labels vs metric, the misconceptions domain",
    ),
}


class Command(BaseCommand):
    help = (
        "Simulate labeling campaigns on the synthetic domain: by default convincing wrong-answer selection "
        "against uniform selection (activelearn.simulation.campaign); --study runs every arm of the small-scale "
        "study in the systematic-error domain, --sweep the systematic share (activelearn.simulation.study). "
        "Arguments after -- go to the simulator (python -m activelearn.simulation.cli --help, or "
        f"activelearn.simulation.study). --write-docs puts the table and plot in {DOC}."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--out", type=Path, default=None, help="report directory (default VAR_DIR/simulation)")
        parser.add_argument("--write-docs", action="store_true", help=f"copy the table and plot into {DOC}")
        kind = parser.add_mutually_exclusive_group()
        kind.add_argument("--study", action="store_true", help="every arm, systematic-error (home) domain")
        kind.add_argument(
            "--sweep", type=float, nargs="+", default=None, help="systematic shares to sweep, e.g. 0 0.5 1"
        )
        parser.add_argument("simulator_args", nargs="*", help="simulator arguments, e.g. -- --seeds 0 1 --fixed-pool")

    def handle(self, *args: Any, **options: Any) -> None:
        from activelearn.simulation import cli, study

        kind = "study" if options["study"] else "sweep" if options["sweep"] is not None else "campaign"
        out: Path = options["out"] or Path(settings.VAR_DIR) / "simulation" / ("" if kind == "campaign" else kind)
        forwarded: list[str] = list(options["simulator_args"])
        if "--backbone-cache" not in forwarded:
            # The pretrained sim: backbones live under this deployment's VAR_DIR, so every
            # campaign run from here reuses the one pretraining.
            forwarded += ["--backbone-cache", str(Path(settings.VAR_DIR) / "simulation" / "backbones")]
        if kind == "sweep":
            forwarded += ["--sweep", *(str(share) for share in options["sweep"])]
        main = cli.main if kind == "campaign" else study.main
        code = main([*forwarded, "--out", str(out)])
        if code:
            raise CommandError(f"the simulation exited with status {code}")
        if options["write_docs"]:
            domain = _domain(forwarded)
            self._write_docs(out, kind, block=f"study-{domain}" if kind == "study" and domain else kind)
        self.stdout.write(f"report in {out}")

    def _write_docs(self, out: Path, kind: str = "campaign", block: str | None = None) -> None:
        block = block or kind
        if block not in BLOCKS:
            raise CommandError(f"no place in {DOC} for a {block} report")
        begin, end, caption = BLOCKS[block]
        table, plot = out / f"{kind}.md", out / f"{kind}.png"
        if not table.is_file():
            raise CommandError(f"no report at {table}")
        docs = Path(settings.BASE_DIR) / DOC
        image = Path(settings.BASE_DIR) / "docs" / "img" / f"{block}.png"
        section = [begin, table.read_text().strip()]
        if plot.is_file():
            image.write_bytes(plot.read_bytes())
            section.append(f"\n![{caption}](img/{block}.png)")
        section.append(end)
        text = docs.read_text()
        block = "\n".join(section)
        pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
        docs.write_text(pattern.sub(lambda _: block, text) if pattern.search(text) else f"{text.rstrip()}\n\n{block}\n")


def _domain(arguments: list[str]) -> str | None:
    """The study's ``--domain`` among the simulator's arguments, unless it is the default."""
    for index, argument in enumerate(arguments):
        value = argument.split("=", 1)[1] if argument.startswith("--domain=") else None
        if argument == "--domain" and index + 1 < len(arguments):
            value = arguments[index + 1]
        if value is not None:
            from activelearn.simulation.study import DEFAULT_DOMAIN

            return None if value == DEFAULT_DOMAIN else value
    return None
