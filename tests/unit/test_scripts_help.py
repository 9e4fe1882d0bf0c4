"""Every script of ``scripts/`` answers ``--help`` with its usage and exit code 0, without
touching a database (issue 39, item 6: one crashed with an IndexError)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parents[2] / "scripts").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_help(script: Path) -> None:
    res = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(script.parents[1])},
    )
    assert res.returncode == 0, res.stderr
    assert "usage:" in res.stdout and "Traceback" not in res.stderr
