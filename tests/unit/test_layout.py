"""The house a newcomer finds: each folder of the code imports only the folders below it
(docs/how-it-works.md, "The code, by the step it serves"), no module imports itself back
through others (type-only imports and imports inside functions count too), the tops of
``commit_protocol/`` and ``datasource/`` hold a dozen entries at most, and no module runs
past 350 lines."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Lowest first: a folder may import those before it (and itself), never one after it.
LAYERS = [
    ("commit_protocol.vocabulary",),
    ("commit_protocol.crypto", "commit_protocol.storage"),
    ("commit_protocol.formats",),
    ("commit_protocol.records",),
    ("commit_protocol.metrics",),
    ("commit_protocol.log",),
    ("commit_protocol.tables",),
    ("commit_protocol.reading",),
    ("commit_protocol.task",),
    ("commit_protocol.commit",),
    ("commit_protocol.checks",),
    ("datasource.options",),
    ("datasource.spark",),
    ("datasource.writing",),
    ("datasource.reading",),
    ("datasource.source",),
    ("datasource.commands",),
]
RANK = {folder: rank for rank, folders in enumerate(LAYERS) for folder in folders}


def modules() -> dict[str, Path]:
    found = {}
    for package in ("commit_protocol", "datasource"):
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def imports(found: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project's modules it imports, anywhere in it (``from pkg import sub``
    counts as the submodule alone)."""
    graph: dict[str, set[str]] = {}
    for name, path in found.items():
        graph[name] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                subs = [f"{node.module}.{a.name}" for a in node.names
                        if f"{node.module}.{a.name}" in found]
                targets = subs if len(subs) == len(node.names) else [node.module, *subs]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in found and t != name)
    return graph


def folder_of(module: str) -> str:
    parts = module.split(".")
    return next((".".join(parts[:k]) for k in (2, 1) if ".".join(parts[:k]) in RANK), module)


def test_every_folder_imports_only_the_folders_below_it():
    found = modules()
    unplaced = sorted({folder_of(m) for m in found} - set(RANK) - {"commit_protocol",
                                                                   "datasource"})
    assert not unplaced, f"folders missing from LAYERS (and docs/how-it-works.md): {unplaced}"
    upward = [f"{module} -> {target}" for module, targets in imports(found).items()
              for target in sorted(targets)
              if folder_of(module) in RANK and folder_of(target) in RANK
              and folder_of(module) != folder_of(target)
              and RANK[folder_of(target)] >= RANK[folder_of(module)]]
    assert not upward, "imports from a lower folder up:\n" + "\n".join(upward)


def test_no_module_imports_itself_back():
    graph = imports(modules())
    circles, done = [], set()
    for start in sorted(graph):
        # every module that reaches back to ``start`` closes a circle through it
        stack, seen = [(start, [start])], {start}
        while stack:
            module, route = stack.pop()
            for target in sorted(graph[module]):
                if target == start and len(route) > 1:
                    circle = frozenset(route)
                    if circle not in done:
                        done.add(circle)
                        circles.append(" -> ".join([*route, start]))
                elif target not in seen:
                    seen.add(target)
                    stack.append((target, [*route, target]))
    assert not circles, "import circles:\n" + "\n".join(circles)


def test_the_tops_hold_a_dozen_entries_and_no_module_runs_past_350_lines():
    for package in ("commit_protocol", "datasource"):
        entries = [p.name for p in (ROOT / package).iterdir()
                   if p.name != "__pycache__" and p.name != "__init__.py"]
        assert len(entries) <= 12, f"{package}/ holds {len(entries)} entries: {sorted(entries)}"
    long = {str(path.relative_to(ROOT)): length for path in modules().values()
            if (length := len(path.read_text().splitlines())) > 350}
    assert not long, f"modules over 350 lines: {long}"


def test_test_modules_have_distinct_names():
    """pytest imports test modules by their base name (no package ``__init__``): two
    ``test_x.py`` in different folders fail the whole run's collection ("import file
    mismatch")."""
    seen: dict[str, Path] = {}
    twice = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if path.name in seen:
            twice.append(f"{seen[path.name].relative_to(ROOT)} and {path.relative_to(ROOT)}")
        seen.setdefault(path.name, path)
    assert not twice, "test modules of the same name: " + "; ".join(twice)
