"""The public API the docs promise is what the package offers, whatever its layout: every
name of ``__all__``, of docs/api.md and of the README / docs import lines imports; the
command line's entry point and ``python -m`` form run; the Agent Server path loads; and
``import langgraph_delta_postgres`` loads the library alone (no command, no benchmark)."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import tomllib
import warnings
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import psycopg
import pytest

import langgraph_delta_postgres as pkg
from langgraph_delta_postgres.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
API = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
AGENT_SERVER_PATH = "langgraph_delta_postgres.agent_server.checkpointer"
_NAME = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)")


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )


def documented() -> list[tuple[str, str | None, str]]:
    """(module, class or None, name) for every name docs/api.md lists under a module
    heading: ``### `Name...``` headings, and the first cell of every table row (a row
    under a class heading names a member of that class)."""
    found: list[tuple[str, str | None, str]] = []
    module: str | None = None
    owner: str | None = None
    for line in API.splitlines():
        if line.startswith("## "):
            m = re.match(r"## `(langgraph_delta_postgres[\w.]*)`", line)
            module, owner = (m.group(1) if m else None), None
        elif module is None:
            continue
        elif line.startswith("### "):
            m = _NAME.match(line[4:])
            owner = None
            if m:
                found.append((module, None, m.group(1)))
                target = getattr(importlib.import_module(module), m.group(1), None)
                owner = m.group(1) if isinstance(target, type) else None
        elif line.startswith("| `"):
            cell = re.sub(r"\([^)]*\)", "", line.split(" | ")[0])  # no (base class)
            for name in _NAME.findall(cell):
                found.append((module, owner, name))
    return found


def test_all_imports_and_is_what_the_docs_list() -> None:
    for name in pkg.__all__:
        assert getattr(pkg, name) is not None, name
    namespace: dict[str, Any] = {}
    exec("from langgraph_delta_postgres import *", namespace)  # no DeprecationWarning
    assert set(pkg.__all__) <= set(namespace)
    headed = {name for module, owner, name in documented()
              if module == "langgraph_delta_postgres" and owner is None}
    assert set(pkg.__all__) - {"CacheStats", "OrderStats", "SaverStats", "WalkStats"} <= headed
    # the stats types are documented in docs/observability.md
    observability = (ROOT / "docs" / "observability.md").read_text(encoding="utf-8")
    assert all(n in observability
               for n in ("CacheStats", "OrderStats", "SaverStats", "WalkStats"))


def test_every_name_of_the_api_reference_exists() -> None:
    names = documented()
    modules = {m for m, _, _ in names}
    assert modules == {
        "langgraph_delta_postgres",
        "langgraph_delta_postgres.migrate",
        "langgraph_delta_postgres.agent_server",
    }
    assert len(names) > 30
    for module, owner, name in names:
        mod = importlib.import_module(module)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # DeltaPruneError
            target = getattr(mod, owner) if owner else mod
            assert hasattr(target, name), (module, owner, name)
    # the async saver's methods, named in its paragraph
    section = API[API.index("### `AsyncDeltaPostgresSaver") :]
    section = section[: section.index("\n### ")]
    methods = set(re.findall(r"`(a[a-z_]+)`", section))
    assert {"aget_tuple", "aprune", "acopy_thread"} <= methods
    for name in methods | {"setup", "from_conn_string"}:
        assert hasattr(pkg.AsyncDeltaPostgresSaver, name), name
    assert hasattr(pkg.DeltaPostgresSaver, "from_conn_string")
    assert pkg.DeltaPostgresSaver.max_history_depth == 1_000_000


def test_the_errors_module_holds_every_error() -> None:
    from langgraph_delta_postgres import errors, migrate

    for name in ("HistoryError", "CorruptCheckpointError", "SetupRequiredError",
                 "MigrationError"):
        assert getattr(pkg, name) is getattr(errors, name), name
    assert migrate.MigrationError is errors.MigrationError


#: each public error and the base an ``except`` written before the common base caught it by
OLD_BASES = {
    "HistoryError": RuntimeError,
    "PrunedValueError": RuntimeError,
    "CorruptCheckpointError": RuntimeError,
    "SetupRequiredError": psycopg.errors.UndefinedTable,
    "MigrationError": RuntimeError,
    "ReplicaMismatchError": ValueError,
    "LostParentError": RuntimeError,
    "StaleServerError": psycopg.OperationalError,
}


def test_one_base_for_every_error_and_the_old_bases_kept() -> None:
    """``except DeltaPostgresError`` catches every error of the package (issue 39); the
    ``except`` clauses users wrote for the old bases still catch each one."""
    import warnings

    from langgraph_delta_postgres import errors

    public = {n for n in pkg.__all__ if n.endswith("Error")} - {"DeltaPostgresError"}
    defined = {
        n for n, v in vars(errors).items()
        if isinstance(v, type) and issubclass(v, BaseException) and not n.startswith("_")
    } - {"DeltaPostgresError"}
    assert public == defined == set(OLD_BASES), (public, defined)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pruned = pkg.DeltaPruneError
    for name, old in [*OLD_BASES.items(), ("DeltaPruneError", RuntimeError)]:
        cls = pruned if name == "DeltaPruneError" else getattr(pkg, name)
        assert issubclass(cls, pkg.DeltaPostgresError), name
        assert issubclass(cls, old), name
        with pytest.raises(old):  # an old except clause, on a real raise
            raise cls("x")
        with pytest.raises(pkg.DeltaPostgresError):
            raise cls("x")


@pytest.mark.parametrize("module", ["langgraph_delta_postgres",
                                    "langgraph_delta_postgres.errors"])
def test_delta_prune_error_imports_with_a_deprecation_warning(module: str) -> None:
    mod = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match="DeltaPruneError is deprecated"):
        cls = mod.DeltaPruneError
    assert issubclass(cls, RuntimeError) and cls.__name__ == "DeltaPruneError"
    assert "DeltaPruneError" not in pkg.__all__
    with pytest.raises(AttributeError):
        mod.NoSuchName  # noqa: B018


def test_import_statements_of_readme_and_docs_run() -> None:
    lines = set()
    # docs/design/ too
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for line in doc.read_text(encoding="utf-8").splitlines():
            if re.match(r"\s*(from langgraph_delta_postgres[\w.]* import |import "
                        r"langgraph_delta_postgres)", line):
                lines.add(line.strip())
    assert lines
    for line in sorted(lines):
        exec(line, {})


def test_the_console_script_and_python_m() -> None:
    target = PYPROJECT["project"]["scripts"]["langgraph-delta-pg"]
    module, _, attr = target.partition(":")
    main = getattr(importlib.import_module(module), attr)
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    installed = entry_points(group="console_scripts", name="langgraph-delta-pg")
    assert [ep.value for ep in installed] == [target]
    assert next(iter(installed)).load() is main
    out = subprocess.run(
        [sys.executable, "-m", "langgraph_delta_postgres", "--version"],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )
    assert out.stdout.strip() == f"langgraph-delta-pg {pkg.__version__}"
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert commands is not None
    documented_cmds = re.findall(r"^\| `(\w+)", API[API.index("## Command line"):], re.M)
    assert set(documented_cmds) == set(commands) == {
        "migrate", "status", "postgres", "demo", "inspect", "bench", "prune"
    }


def test_the_agent_server_path() -> None:
    module, _, attr = AGENT_SERVER_PATH.rpartition(".")
    checkpointer = getattr(importlib.import_module(module), attr)
    assert callable(checkpointer)
    docs = (ROOT / "docs" / "agent-server.md").read_text(encoding="utf-8")
    assert f'"path": "{AGENT_SERVER_PATH}"' in docs


def test_import_loads_the_library_alone() -> None:
    out = _run(
        "import json, sys\n"
        "import langgraph_delta_postgres\n"
        "print(json.dumps(sorted(m for m in sys.modules "
        "if m.startswith('langgraph_delta_postgres'))))\n"
    )
    loaded = json.loads(out.stdout)
    assert "langgraph_delta_postgres.saver" in loaded
    assert "langgraph_delta_postgres.aio" in loaded
    tools = [m for m in loaded if m.startswith(("langgraph_delta_postgres.cli",
                                                "langgraph_delta_postgres.bench",
                                                "langgraph_delta_postgres._local"))]
    assert tools == []
