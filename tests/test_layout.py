"""The layout rules of labeling/, activelearn/ and mathtext/ (docs/architecture.md), checked on the source.

The module graph: no import circles, and dependencies that run one way, room by
room. Built with ast, not from what happens to be imported at run time: every
import counts, at the top of a module or inside a function, so a lazy import
cannot hide a circle or a wrong-way arrow. Raw SQL only where it is allowed, and
every module docs/architecture.md names exists.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("labeling", "activelearn", "mathtext")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def _imported(node: ast.AST, module: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The dotted names one import statement reaches (a module if it is one of ours, else the package)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
            anchor = package[: len(package) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        for alias in node.names:
            name = f"{base}.{alias.name}"
            yield name if name in known else base


def import_graph() -> dict[str, set[str]]:
    """Module -> every module or package it imports (ours by dotted name, others by their top-level name)."""
    known = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            for name in _imported(node, module, path, known):
                # The longest of our modules that the name starts with; others stay as imported.
                while name not in known and "." in name and name.split(".")[0] in PACKAGES:
                    name = name.rsplit(".", 1)[0]
                targets.add(name)
        targets.discard(module)
        graph[module] = targets
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of two or more of our modules (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node] & graph.keys()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def _reached(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module a run-time import of ``start`` executes: its imports and its parent packages', transitively."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        parents = [module.rsplit(".", depth)[0] for depth in range(1, module.count(".") + 1)]
        todo.extend(target for target in [*graph.get(module, ()), *parents] if target not in seen)
    return seen


def test_there_is_no_import_circle() -> None:
    assert import_circles(import_graph()) == []


# The rooms, lowest first: a module imports only from rooms below its own (or
# from its own room). activelearn builds on labeling, so its rooms sit above
# labeling's; mathtext (plain text rules both apps use) is below them all.
ROOMS = [
    ["mathtext"],
    ["labeling.models"],
    ["labeling.labelers", "labeling.data", "labeling.migrations"],
    ["labeling.quality"],
    ["labeling.work"],
    ["labeling.web", "labeling.staff", "labeling.api", "labeling.management", "labeling.checks"],
    # The template tags place what web/ builds (web/panel.py) in the templates.
    ["labeling.admin", "labeling.tasks", "labeling.urls", "labeling.apps", "labeling.templatetags"],
    ["activelearn.models", "activelearn.migrations"],
    # Plain torch (prm), plain grading with its service, the selection rules and
    # selectors, and the workers' pulse, which checkpoint training and the
    # generation steps both beat (it imports nothing of ours).
    ["activelearn.prm", "activelearn.grading", "activelearn.selection", "activelearn.generations.liveness"],
    # The plain generators, which phase 1 and a generation's sampling step both use.
    ["activelearn.stepgen.base"],
    ["activelearn.stepgen.builtin", "activelearn.stepgen.openai_http"],
    ["activelearn.stepgen.local_lm"],
    ["activelearn.simulation", "activelearn.checkpoints"],
    ["activelearn.generations"],
    # Phase 1 opens its generation with the pipeline's bounds and errors; the worker side
    # of step generation (service) beside it.
    ["activelearn.stepgen"],
    ["activelearn.dashboard", "activelearn.demo"],
    ["activelearn.admin", "activelearn.tasks", "activelearn.apps", "activelearn.management"],
]


def _room(module: str) -> tuple[int, str] | None:
    for rank, rooms in enumerate(ROOMS):
        for room in rooms:
            if module == room or module.startswith(room + "."):
                return rank, room
    return None


def test_the_rooms_import_only_from_rooms_below_them() -> None:
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        if (here := _room(module)) is not None
        for target in targets
        if (there := _room(target)) is not None and there[1] != here[1] and there[0] >= here[0]
    )
    assert upward == []


def test_every_module_is_in_a_room() -> None:
    assert [m for m in import_graph() if m not in PACKAGES and _room(m) is None] == []


def test_there_is_no_circle_between_rooms() -> None:
    graph = import_graph()
    rooms: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if (here := _room(module)) is not None:
            there = {found[1] for target in targets if (found := _room(target)) is not None}
            rooms.setdefault(here[1], set()).update(there - {here[1]})
    assert import_circles(rooms) == []


def test_labeling_imports_nothing_of_activelearn() -> None:
    wrong_way = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        if module.split(".")[0] == "labeling"
        for target in targets
        if target.split(".")[0] == "activelearn"
    )
    assert wrong_way == []


def test_mathtext_imports_neither_django_nor_the_apps_nor_torch() -> None:
    graph = import_graph()
    reached = _reached(graph, "mathtext")
    assert all(m.split(".")[0] == "mathtext" for m in reached & graph.keys())
    outside = {t.split(".")[0] for m in reached & graph.keys() for t in graph[m]}
    assert not outside & {"django", "labeling", "activelearn", "annotate", "torch", "transformers", "sympy"}


def test_no_lazy_import_goes_up_a_room() -> None:
    # The rooms test counts lazy imports too; this names them, so that a lazy
    # import is never the way round an arrow (prm reaching up into simulation).
    upward = []
    for module, path in _modules().items():
        here = _room(module)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import | ast.ImportFrom):
                    for target in _imported(inner, module, path, _modules()):
                        there = _room(target)
                        if here and there and there[1] != here[1] and there[0] >= here[0]:
                            upward.append(f"{module} -> {target}")
    assert upward == []


def test_it_sees_lazy_imports_and_circles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_circles(graph) == [["a", "b", "c"]]
    lazy = ast.parse("def f():\n    from labeling.work import queue\n")
    known = {"labeling.work.queue": ROOT / "labeling/work/queue.py"}
    [node] = [n for n in ast.walk(lazy) if isinstance(n, ast.ImportFrom)]
    assert list(_imported(node, "labeling.web.views", ROOT / "labeling/web/views.py", known)) == ["labeling.work.queue"]


# Raw SQL for speed lives in the hot-path module only; the others hold the few
# statements the ORM cannot express at all.
RAW_SQL_ALLOWED = {
    "labeling.work.hotpath": "a rating click and a hand-out (the benchmarks in docs/benchmarks.md)",
    "labeling.quality.control": "the rolling QC window, read on every hand-out and scored when it changes",
    "labeling.labelers": "the request's labeler row, read on every submit + next",
    "labeling.work.candidates": "claiming a candidate slot: an upsert that says whether it wrote (RETURNING)",
    "labeling.data.snapshot": "the isolation level of a long read (SET TRANSACTION, BEGIN DEFERRED)",
    "labeling.data.bulkload": "COPY, with ids taken from the sequence first",
    "labeling.staff.admin_base": "the planner's row estimate of a large table (pg_class)",
    "labeling.checks": "the server's autovacuum settings and the queue tables' storage options (pg_class)",
}


_CURSOR_HELPERS = {"prepared_cursor", "statement_sent"}  # annotate.postgresql


def _raw_sql_calls(path: Path) -> list[int]:
    """Lines that reach for a cursor or for raw SQL through the ORM."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in {"cursor", "raw", "extra"}:  # connection.cursor(), Model.objects.raw(), .extra()
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CURSOR_HELPERS:
            lines.append(node.lineno)  # annotate.postgresql's: a cursor too
        elif isinstance(node, ast.Name | ast.alias) and getattr(node, "id", getattr(node, "name", "")) == "RawSQL":
            lines.append(node.lineno)
    return lines


def test_raw_sql_is_only_where_it_is_allowed() -> None:
    found = {
        module: lines
        for module, path in _modules().items()
        if ".migrations." not in module and (lines := _raw_sql_calls(path))
    }
    assert sorted(found.keys() - RAW_SQL_ALLOWED.keys()) == []
    assert sorted(RAW_SQL_ALLOWED.keys() - found.keys()) == []  # a stale entry is taken off the list


# --- docs/architecture.md names only what exists -------------------------------

ARCHITECTURE = ROOT / "docs" / "architecture.md"
_NAME = re.compile(r"^(?:[A-Za-z_]\w*\.py|(?:[A-Za-z_]\w*/)+)$")


def architecture_module_map() -> list[str]:
    """The paths of the module map (the code block that lists labeling/, activelearn/, mathtext/)."""
    text = ARCHITECTURE.read_text()
    block = next(b for b in re.findall(r"```\n(.*?)```", text, flags=re.S) if b.startswith("labeling/"))
    paths: list[str] = []
    folders: list[tuple[int, str]] = []  # (indent, path) of the folders the line sits in
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip())
        names = []
        for token in line.split():
            if not _NAME.match(token):
                break
            names.append(token)
        if not names:
            continue
        while folders and folders[-1][0] >= indent:
            folders.pop()
        base = folders[-1][1] if folders else ""
        paths.extend(base + name for name in names)
        if len(names) == 1 and names[0].endswith("/"):
            folders.append((indent, base + names[0]))
    return paths


def architecture_dotted_names() -> list[str]:
    """Every ``package.module(.attribute)`` in backticks, in full."""
    text = ARCHITECTURE.read_text()
    full = re.findall(r"`((?:labeling|activelearn|mathtext|annotate)(?:\.\w+)+)`", text)
    # Names inside labeling's rooms are written from the room down (`work.rating.presses_apply`).
    rooms = re.findall(r"`((?:work|quality|data|staff|web)(?:\.\w+)+)`", text)
    hot = re.findall(r"`(hotpath(?:\.\w+)+)`", text)
    names = {*full, *(f"labeling.{n}" for n in rooms), *(f"labeling.work.{n}" for n in hot)}
    return sorted(n for n in names if not n.endswith(".py"))  # a file name, checked as a path


def architecture_paths() -> list[str]:
    text = ARCHITECTURE.read_text()
    return sorted(set(re.findall(r"`((?:labeling|activelearn|mathtext|annotate|tests|static)/[\w./-]*)`", text)))


def test_every_module_the_architecture_doc_names_exists() -> None:
    module_map = architecture_module_map()
    assert len(module_map) > 80  # the map was read, not skipped
    missing = [p for p in [*module_map, *architecture_paths()] if not (ROOT / p).exists()]
    for dotted in architecture_dotted_names():
        parts = dotted.split(".")
        # The longest importable prefix, then attributes.
        for cut in range(len(parts), 0, -1):
            try:
                found: object = importlib.import_module(".".join(parts[:cut]))
            except ModuleNotFoundError:
                continue
            for attribute in parts[cut:]:
                found = getattr(found, attribute, None)
            if found is None:
                missing.append(dotted)
            break
        else:
            missing.append(dotted)
    assert missing == []


def test_every_package_of_the_apps_is_in_the_architecture_doc() -> None:
    module_map = set(architecture_module_map())
    packages = sorted(
        str(path.parent.relative_to(ROOT)) + "/"
        for package in PACKAGES
        for path in (ROOT / package).rglob("__init__.py")
        if "migrations" not in path.parts and "commands" not in path.parts
    )
    assert [p for p in packages if not any(m.startswith(p) for m in module_map)] == []
