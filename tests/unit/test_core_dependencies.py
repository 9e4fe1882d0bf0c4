"""What a plain ``pip install`` brings is enough for the library and the database
commands (``migrate``, ``status``, ``inspect``, ``prune``): every third-party module they
import (outside a ``try: ... except ImportError``) belongs to a distribution the package
requires without an extra (issue 38, item 7: ``prune`` needed the ``cli`` extra's rich and
failed from a plain install)."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
from pathlib import Path

import langgraph_delta_postgres

PACKAGE = Path(langgraph_delta_postgres.__file__).parent
#: what the optional commands and integrations need, each behind its own extra
OPTIONAL = {
    "bench", "demo.py", "demo_session.py", "demo_report.py", "postgres.py", "embedded.py",
    "watchdog.py", "standby.py", "standby_plan.py", "agent_server.py",
}


def _norm(name: str) -> str:
    return name.lower().replace("_", "-")


def _requirements(dist: str) -> set[str]:
    """The distributions ``dist`` requires without an extra (markers otherwise ignored)."""
    names = set()
    for r in md.requires(dist) or []:
        if "extra ==" not in r:
            names.add(_norm(re.split(r"[\s\[<>=!;~(]", r, maxsplit=1)[0]))
    return names


def _closure(names: set[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            todo.extend(_requirements(name))
        except md.PackageNotFoundError:
            pass  # a marker excluded it here (e.g. another platform's package)
    return seen


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
            isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
            for h in node.handlers
        ):
            guarded.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_plain_install_covers_library_and_database_commands() -> None:
    direct = _requirements("langgraph-delta-postgres")
    assert "rich" in direct  # prune's table and progress bar
    core = _closure(direct)
    dists = md.packages_distributions()
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if OPTIONAL & {rel.parts[0], path.name}:
            continue
        for mod in _imports(path):
            if mod in sys.stdlib_module_names or mod in ("langgraph_delta_postgres", "__future__"):
                continue
            owners = {_norm(d) for d in dists.get(mod, [])}
            if not owners & core:
                wrong.append(f"{rel}: {mod} ({sorted(owners) or 'not installed'})")
    assert not wrong, f"needs what a plain install lacks: {wrong}"
