"""The package's layout rules (issue 39): the two tools, the command line (``cli/``) and
the benchmark (``bench/``), never import each other; what both need lives in ``_local/``.
Checked on the source (every import statement, at any depth: a function-level import
counts too), so a new import between them fails here, not in a user's plain install."""

from __future__ import annotations

import ast
from pathlib import Path

import langgraph_delta_postgres

PACKAGE = Path(langgraph_delta_postgres.__file__).parent
NAME = PACKAGE.name


def _imported(path: Path, root: Path) -> set[str]:
    """The absolute names of the modules ``path`` (a file of the package at ``root``)
    imports, relative imports resolved."""
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    package = parts[:-1]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names.add(mod)
            names.update(f"{mod}.{a.name}" for a in node.names)
    return names


def _crossing(src: str, dst: str, root: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted((root / src).rglob("*.py")):
        for name in sorted(_imported(path, root)):
            if name == f"{NAME}.{dst}" or name.startswith(f"{NAME}.{dst}."):
                found.append(f"{path.relative_to(root).as_posix()} imports {name}")
    return found


def test_cli_does_not_import_bench() -> None:
    assert _crossing("cli", "bench") == []


def test_bench_does_not_import_cli() -> None:
    assert _crossing("bench", "cli") == []


def test_the_check_sees_an_import_at_any_depth_and_relative(tmp_path: Path) -> None:
    """The checker itself: a relative import inside a function is resolved and seen."""
    root = tmp_path / NAME
    (root / "bench").mkdir(parents=True)
    (root / "bench" / "probe.py").write_text(
        "def f():\n    from ..cli import postgres\n    return postgres\n"
    )
    assert _crossing("bench", "cli", root) == [
        f"bench/probe.py imports {NAME}.cli",
        f"bench/probe.py imports {NAME}.cli.postgres",
    ]
