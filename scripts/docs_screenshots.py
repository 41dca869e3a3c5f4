"""Screenshots of the labeler's task screen and the staff dashboard, taken from a running demo.

    scripts/run-embedded.sh                      # the demo (load_demo), at http://127.0.0.1:8000/
    .venv/bin/python scripts/docs_screenshots.py # writes docs/img/task-screen.png and docs/img/dashboard.png

``--width 390 --out DIR`` takes the same screens at phone width into DIR. The
demo labeler ("labeler") rates the first two steps of their current task by
keyboard before the task screen is taken, so the picture shows rated rows. The
demo serves its phase-1 problems first; the labeler gives them up to reach
phase-2 work (a demo that shot once has none left).
Chromium is Debian's (/usr/bin/chromium), driven by Playwright.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

DOCS_IMG = Path(__file__).resolve().parents[1] / "docs" / "img"


def _sign_in(page: Page, url: str, username: str, password: str) -> None:
    page.goto(url + "/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(url + "/")


def _idle(page: Page) -> None:
    page.wait_for_function("() => !document.querySelector('.htmx-request') && !window.pressQueue.busy()")


def task_screen(page: Page, url: str, target: Path) -> None:
    _sign_in(page, url, "labeler", os.environ.get("DEMO_LABELER_PASSWORD", "labeler"))
    page.click("text=/Start labeling|Continue labeling/")
    page.wait_for_selector("#task[data-assignment]")
    while page.locator("#task.phase-one").count():
        held = page.get_attribute("#task", "data-assignment")
        page.click("text=/Give up on this/")
        page.fill("form[action$='/give-up/'] textarea[name=reason]", "passed over for the phase-2 screenshot")
        page.click("text=Give up and get the next task")
        page.wait_for_function("held => document.querySelector('#task')?.dataset.assignment !== held", arg=held)
    page.wait_for_selector("#task form.completion.cursor")
    rated = page.locator("#steps form.completion.r-good, #steps form.completion.r-okay").count()
    for key in ("3", "2")[rated:]:
        page.keyboard.press(key)
        _idle(page)
    page.wait_for_selector(".problem .katex, .problem .answer-box")
    page.screenshot(path=str(target), full_page=True)


def dashboard(page: Page, url: str, target: Path) -> None:
    _sign_in(page, url, "admin", os.environ.get("DEMO_ADMIN_PASSWORD", "admin"))
    page.goto(url + "/dashboard/")
    page.wait_for_selector("svg.chart")
    page.screenshot(path=str(target), full_page=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the running demo (default %(default)s)")
    parser.add_argument("--width", type=int, default=1280, help="window width in CSS pixels (default %(default)s)")
    parser.add_argument("--out", type=Path, default=DOCS_IMG, help="where the PNGs go (default docs/img)")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    if not args.out.is_dir():
        parser.error(f"--out {args.out}: no such directory")
    url = args.url.rstrip("/")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium, args=["--headless", "--no-sandbox"])
        for shoot, name in ((task_screen, "task-screen.png"), (dashboard, "dashboard.png")):
            context = browser.new_context(viewport={"width": args.width, "height": 900})
            page = context.new_page()
            page.set_default_timeout(30_000)
            shoot(page, url, args.out / name)
            print(f"{args.out / name}")
            context.close()
        browser.close()


if __name__ == "__main__":
    main()
