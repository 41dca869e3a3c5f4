"""The layout rules of labeling/ and activelearn/ (docs/architecture.md), checked on the source.

The module graph: no import circles, and dependencies that run one way. Built
with ast, not from what happens to be imported at run time: every import
counts, at the top of a module or inside a function, so a lazy import cannot
hide a circle or a wrong-way arrow. And raw SQL only where it is allowed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("labeling", "activelearn")

# activelearn builds on labeling, never the reverse. The exceptions: plain
# text rules shared with the step generator and the grader (what a step is,
# what a final answer is), which import neither Django nor either app's Django code.
LABELING_MAY_IMPORT = {
    "activelearn.stepgen.splitting": "what one step is (the one splitter), shared with the step generator",
    "activelearn.grading.extraction": "the final answer a solution states, stored by the imports and the demo",
}


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


# The rooms of labeling/, lowest first: a module imports only from rooms below
# its own (or from its own room).
ROOMS = [
    ["labeling.models"],
    ["labeling.labelers", "labeling.data", "labeling.migrations"],
    ["labeling.quality"],
    ["labeling.work"],
    ["labeling.web", "labeling.staff", "labeling.api", "labeling.management", "labeling.checks"],
    # The template tags place what web/ builds (web/panel.py) in the templates.
    ["labeling.admin", "labeling.tasks", "labeling.urls", "labeling.apps", "labeling.templatetags"],
]


def _room(module: str) -> tuple[int, str] | None:
    for rank, rooms in enumerate(ROOMS):
        for room in rooms:
            if module == room or module.startswith(room + "."):
                return rank, room
    return None


def test_the_rooms_of_labeling_import_only_from_rooms_below_them() -> None:
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        if (here := _room(module)) is not None
        for target in targets
        if (there := _room(target)) is not None and there[1] != here[1] and there[0] >= here[0]
    )
    assert upward == []


def test_every_module_of_labeling_is_in_a_room() -> None:
    assert [m for m in import_graph() if m.startswith("labeling.") and _room(m) is None] == []


def test_labeling_imports_nothing_of_activelearn_but_the_listed_plain_rules() -> None:
    graph = import_graph()
    wrong_way = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module.split(".")[0] == "labeling"
        for target in targets
        if target.split(".")[0] == "activelearn" and target not in LABELING_MAY_IMPORT
    )
    assert wrong_way == []


def test_what_labeling_may_import_of_activelearn_is_plain_python() -> None:
    graph = import_graph()
    for allowed in LABELING_MAY_IMPORT:
        assert allowed in graph, f"{allowed} is listed but does not exist: take it off the list"
        reached = _reached(graph, allowed)
        assert not {m for m in reached if m.split(".")[0] in ("django", "labeling")}, (allowed, sorted(reached))
        # Its own package's modules only as far as they are plain too.
        for module in reached & graph.keys():
            assert not {t for t in graph[module] if t.split(".")[0] == "django"}, module


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
