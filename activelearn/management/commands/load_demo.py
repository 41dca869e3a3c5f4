"""``manage.py load_demo``: CHAMP as a small campaign (pool, gold, labeled and open work), plus demo logins."""

from __future__ import annotations

import os
from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from activelearn.demo import DEMO_PHASE_ONE_PROBLEMS, DemoPhaseOne, demo_campaign_load
from activelearn.stepgen.service import step_generator_problem
from labeling.data.demo import (
    DEFAULT_ADMIN_PASSWORD,
    DEFAULT_LABELER_PASSWORD,
    DEFAULT_OPEN_PER_PROBLEM,
    DemoError,
    DemoLogin,
    default_passwords_allowed,
)


class Command(BaseCommand):
    help = (
        "Load demo data: the 270 problems of the CHAMP benchmark (champ-dataset package) with their "
        "reference answers and every distinct real GPT-3.5/GPT-4/GPT-4 Turbo/PaLM 2 solution split one step "
        "per line; CHAMP's human first-wrong-step annotations as the screening set, generation 0's QC items "
        "and labeled generation-0 work; a few open generation-0 tasks per problem, the rest kept as the pool; "
        "final answers graded; a few problems open in phase 1, whose candidate steps the worker's step "
        "generator proposes when a labeler opens them; a demo admin ('admin') and an active demo labeler ('labeler'). "
        "Passwords come from DEMO_ADMIN_PASSWORD / DEMO_LABELER_PASSWORD (default: the "
        "username; only allowed with DEBUG or SQLite). Idempotent: existing rows and passwords are kept."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        size = parser.add_mutually_exclusive_group()
        size.add_argument(
            "--solutions-per-problem",
            type=int,
            default=None,
            metavar="N",
            help="solutions loaded per problem besides the annotated ones (default: every distinct one, "
            "about 13,300 in all; 0 loads problems only)",
        )
        size.add_argument(
            "--all", action="store_true", help="load every distinct solution (the default; kept for scripts)"
        )
        parser.add_argument(
            "--open-per-problem",
            type=int,
            default=DEFAULT_OPEN_PER_PROBLEM,
            metavar="N",
            help=f"open generation-0 tasks per problem (default {DEFAULT_OPEN_PER_PROBLEM}); the rest is the pool",
        )
        parser.add_argument("--problems", type=int, metavar="N", help="only the first N problems (a smaller demo)")
        parser.add_argument(
            "--phase-one-problems",
            type=int,
            default=None,
            metavar="N",
            help=f"demo problems opened in phase 1 if none is yet (default {DEMO_PHASE_ONE_PROBLEMS}; "
            "0 with --solutions-per-problem 0, which loads problems only)",
        )
        parser.add_argument(
            "--no-grade", action="store_true", help="leave final answers ungraded (grade_solutions does it later)"
        )
        parser.add_argument(
            "--reset-passwords",
            action="store_true",
            help="set the demo accounts' passwords even if the accounts already exist",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        per_problem: int | None = None if options["all"] else options["solutions_per_problem"]
        if per_problem is not None and per_problem < 0:
            raise CommandError(f"--solutions-per-problem must be 0 or more, got {per_problem}")
        if options["open_per_problem"] < 0:
            raise CommandError(f"--open-per-problem must be 0 or more, got {options['open_per_problem']}")
        if options["problems"] is not None and options["problems"] < 1:
            raise CommandError(f"--problems must be at least 1, got {options['problems']}")
        phase_one = options["phase_one_problems"]
        if phase_one is None:
            phase_one = 0 if per_problem == 0 else DEMO_PHASE_ONE_PROBLEMS
        if phase_one < 0:
            raise CommandError(f"--phase-one-problems must be 0 or more, got {phase_one}")
        admin_password = os.environ.get("DEMO_ADMIN_PASSWORD") or DEFAULT_ADMIN_PASSWORD
        labeler_password = os.environ.get("DEMO_LABELER_PASSWORD") or DEFAULT_LABELER_PASSWORD
        uses_default = admin_password == DEFAULT_ADMIN_PASSWORD or labeler_password == DEFAULT_LABELER_PASSWORD
        if uses_default and not default_passwords_allowed(debug=settings.DEBUG):
            raise CommandError(
                "refusing to create demo accounts with well-known passwords on a non-local database "
                "(DEBUG off, not SQLite): set DEMO_ADMIN_PASSWORD and DEMO_LABELER_PASSWORD"
            )

        verbose = options["verbosity"] >= 1
        try:
            campaign = demo_campaign_load(
                solutions_per_problem=per_problem,
                admin_password=admin_password,
                labeler_password=labeler_password,
                reset_passwords=options["reset_passwords"],
                open_per_problem=options["open_per_problem"],
                problems=options["problems"],
                grade=not options["no_grade"],
                phase_one_problems=phase_one,
                progress=self.stdout.write if verbose else None,
            )
        except DemoError as exc:
            raise CommandError(str(exc)) from exc
        result = campaign.data

        self.stdout.write(
            self.style.SUCCESS(
                f"Demo data: {result.problems_total} problems, {result.solutions_total} solutions, "
                f"{result.tasks_total} tasks in generation {result.generation_number} ({result.generation_status}); "
                f"this run created {result.problems_created} problems, {result.solutions_created} solutions, "
                f"{result.tasks_created} tasks."
            )
        )
        self.stdout.write(
            f"  {result.labeled_created} human labels loaded as labeled work this run; screening set "
            f"{campaign.screening_items} items, {campaign.quality_control_items} QC items; {result.pool} solutions "
            f"in the pool for the next generation; {campaign.graded} final answers graded this run."
        )
        if campaign.phase_one is not None:
            self._phase_one_lines(campaign.phase_one)
        # Always printed, even with --verbosity 0: `make run` users read their logins here.
        self.stdout.write("")
        self.stdout.write("  Demo logins:")
        self.stdout.write(self._login_line("admin (staff, superuser)", result.admin))
        self.stdout.write(self._login_line("labeler (screened, active)", result.labeler))
        self.stdout.write("")

    def _phase_one_lines(self, phase_one: DemoPhaseOne) -> None:
        if phase_one.closed:
            self.stdout.write("  Phase 1 is closed (an admin closed it): no phase-1 work was opened.")
            return
        self.stdout.write(
            f"  Phase 1: {phase_one.open_tasks} open tasks on demo problems ({phase_one.opened} opened this run), "
            "served to the labeler first."
        )
        problem = step_generator_problem()
        if problem is None:
            self.stdout.write(
                f"  Phase-1 candidate steps: {settings.STEPGEN_BACKEND} backend"
                + (f" ({settings.STEPGEN_LOCAL_MODEL_DIR})" if settings.STEPGEN_BACKEND == "local" else "")
                + ", generated by the worker when a labeler opens a step."
            )
        else:
            # A warning, not an error: the rest of the demo works, and a labeler can write every step.
            self.stdout.write(
                self.style.WARNING(
                    f"  Phase-1 candidate steps are unavailable: {problem}. Labelers can still write each step "
                    "themselves."
                )
            )

    def _login_line(self, role: str, login: DemoLogin) -> str:
        line = f"    {role:<26} username: {login.username:<10} password: {login.password}"
        if not login.password_works:
            line += "  (account existed with another password; kept: use --reset-passwords)"
        return line
