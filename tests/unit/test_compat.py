"""The dependency range: the package's one private import from langgraph-checkpoint fails
with an error that names the supported versions, and pyproject states the same range."""

from __future__ import annotations

import tomllib
from pathlib import Path

from langgraph_delta_postgres._compat import SUPPORTED_LANGGRAPH_CHECKPOINT
from tests.unit.test_demo_inspect import python_c

ROOT = Path(__file__).resolve().parents[2]


def test_missing_private_snapshot_type_is_a_clear_import_error() -> None:
    # A langgraph-checkpoint without _DeltaSnapshot, simulated by deleting it before import.
    code = (
        "import langgraph.checkpoint.serde.types as t\n"
        "del t._DeltaSnapshot\n"
        "import langgraph_delta_postgres\n"
    )
    p = python_c(code)
    assert p.returncode == 1
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: langgraph-delta-postgres needs langgraph-checkpoint"), last
    assert "_DeltaSnapshot" in last
    assert f"pip install 'langgraph-checkpoint{SUPPORTED_LANGGRAPH_CHECKPOINT}'" in last


def test_pyproject_pins_the_supported_range() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"langgraph-checkpoint{SUPPORTED_LANGGRAPH_CHECKPOINT}" in deps


def test_version_is_the_installed_distributions() -> None:
    import importlib.metadata

    import langgraph_delta_postgres

    assert langgraph_delta_postgres.__version__ == importlib.metadata.version(
        "langgraph-delta-postgres"
    )
