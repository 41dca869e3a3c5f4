"""``manage.py load_demo``: CHAMP problems and LLM solutions as generation-0 work, plus demo logins."""

from __future__ import annotations

import os
from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from labeling.data.demo import (
    DEFAULT_ADMIN_PASSWORD,
    DEFAULT_LABELER_PASSWORD,
    DEFAULT_SOLUTIONS_PER_PROBLEM,
    DemoError,
    DemoLogin,
    default_passwords_allowed,
    demo_load,
)


class Command(BaseCommand):
    help = (
        "Load demo data: the 270 problems of the CHAMP benchmark (champ-dataset package) with their "
        "reference answers, real GPT-3.5/GPT-4/GPT-4 Turbo/PaLM 2 solutions split one step per line, "
        "generation 0 with one open task per solution, a demo admin ('admin') and an active demo labeler "
        "('labeler'). Passwords come from DEMO_ADMIN_PASSWORD / DEMO_LABELER_PASSWORD (default: the "
        "username; only allowed with DEBUG or SQLite). Idempotent: existing rows and passwords are kept."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        size = parser.add_mutually_exclusive_group()
        size.add_argument(
            "--solutions-per-problem",
            type=int,
            default=DEFAULT_SOLUTIONS_PER_PROBLEM,
            metavar="N",
            help=f"solutions loaded per problem (default {DEFAULT_SOLUTIONS_PER_PROBLEM}; 0 loads problems only)",
        )
        size.add_argument(
            "--all",
            action="store_true",
            help="load every usable solution (about 13,300 distinct ones; takes longer)",
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
            result = demo_load(
                solutions_per_problem=per_problem,
                admin_password=admin_password,
                labeler_password=labeler_password,
                reset_passwords=options["reset_passwords"],
                progress=self.stdout.write if verbose else None,
            )
        except DemoError as exc:
            raise CommandError(str(exc)) from exc

        self.stdout.write(
            self.style.SUCCESS(
                f"Demo data: {result.problems_total} problems, {result.solutions_total} solutions, "
                f"{result.tasks_total} tasks in generation {result.generation_number} ({result.generation_status}); "
                f"this run created {result.problems_created} problems, {result.solutions_created} solutions, "
                f"{result.tasks_created} tasks."
            )
        )
        # Always printed, even with --verbosity 0: `make run` users read their logins here.
        self.stdout.write("")
        self.stdout.write("  Demo logins:")
        self.stdout.write(self._login_line("admin (staff, superuser)", result.admin))
        self.stdout.write(self._login_line("labeler (active labeler)", result.labeler))
        self.stdout.write("")

    def _login_line(self, role: str, login: DemoLogin) -> str:
        line = f"    {role:<26} username: {login.username:<10} password: {login.password}"
        if not login.password_works:
            line += "  (account existed with another password; kept: use --reset-passwords)"
        return line
