"""The package's layout rules (issue 39).

* The two tools, the command line (``cli/``) and the benchmark (``bench/``), never import
  each other; what both need lives in ``_local/``. Checked on the source (every import
  statement, at any depth: a function-level import counts too), so a new import between
  them fails here, not in a user's plain install.
* No module of the package is over :data:`MAX_LINES` lines, except the ones
  ``scripts/async_to_sync.py`` generates (their source is held to it) and, for now, the
  modules of :data:`OVER_FOR_NOW`; a module of that list that is no longer over fails too,
  so the list only shrinks.
"""

from __future__ import annotations

import ast
import importlib.util
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


# ---------------------------------------------------------------------- module size

MAX_LINES = 400


def _generated() -> set[str]:
    """The modules ``scripts/async_to_sync.py`` writes (its ``SOURCES``), by their path
    in the package."""
    script = PACKAGE.parent / "scripts" / "async_to_sync.py"
    spec = importlib.util.spec_from_file_location("_async_to_sync", script)
    assert spec is not None and spec.loader is not None, script
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {target.removeprefix(f"{NAME}/") for _, target in module.SOURCES}


def _lines(root: Path) -> dict[str, int]:
    return {
        path.relative_to(root).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(root.rglob("*.py"))
    }


def _over(root: Path, exempt: set[str]) -> dict[str, int]:
    return {rel: n for rel, n in _lines(root).items() if n > MAX_LINES and rel not in exempt}


def test_the_generated_modules_are_read_from_the_generator() -> None:
    assert _generated() >= {"saver.py", "replicas/_sync.py", "_migrate_sync.py"}


def test_no_module_is_over_the_limit() -> None:
    assert _over(PACKAGE, _generated()) == {}



def test_the_size_check_counts_lines(tmp_path: Path) -> None:
    """The checker itself: a module of MAX_LINES lines passes, one more fails, at any
    depth, unless exempt."""
    root = tmp_path / NAME
    (root / "sub").mkdir(parents=True)
    (root / "at_limit.py").write_text("x = 1\n" * MAX_LINES)
    (root / "sub" / "over.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (root / "made.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert _over(root, {"made.py"}) == {"sub/over.py": MAX_LINES + 1}
