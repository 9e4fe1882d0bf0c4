"""The sync modules are what scripts/async_to_sync.py makes of their async sources (issue
39, item 1): the committed files match, a hand edit is caught, and the rewrite does what
its docstring says."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "async_to_sync.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("async_to_sync", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_committed_sync_modules_are_generated() -> None:
    res = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    tool = _tool()
    for _source, target in tool.SOURCES:
        first = (ROOT / target).read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("# Generated from ") and "do not edit" in first, target


def test_check_fails_on_a_hand_edit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tool = _tool()
    for source, target in tool.SOURCES:
        for rel in (source, target):
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / rel, tmp_path / rel)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / tool.SOURCES[0][1]
    target.write_text(target.read_text(encoding="utf-8").replace(
        "def get_tuple(", "def get_tuple(  # edited by hand\n        ", 1), encoding="utf-8")
    monkeypatch.setattr(tool, "ROOT", tmp_path)
    monkeypatch.setattr(sys, "argv", ["async_to_sync.py", "--check"])
    assert tool.main() == 1
    monkeypatch.setattr(sys, "argv", ["async_to_sync.py"])
    assert tool.main() == 0
    monkeypatch.setattr(sys, "argv", ["async_to_sync.py", "--check"])
    assert tool.main() == 0
    assert target.read_text(encoding="utf-8") == (ROOT / tool.SOURCES[0][1]).read_text(
        encoding="utf-8")


def test_the_rewrite() -> None:
    source = '''\
# <async-only>
"""async doc"""
# </async-only>
# <sync-only>
# """sync doc"""
# </sync-only>
import asyncio  # async-only


class AsyncDeltaPostgresSaver(SyncBridge, SaverCore):
    async def aget_tuple(self, conn: AsyncConnection) -> None:
        """Calls ``aput`` and aput_writes; not aputx."""
        async with self.lock:  # an AsyncConnectionPool's
            await (await conn.execute("x")).fetchone()
            await (await conn.execute("x") + 1).fetchone()
            rows = [x async for x in self.alist()]
        # <sync-only>
        # if rows:
        #     return None
        # </sync-only>
        await asleep(1)
'''
    assert _tool().convert(source) == '''\
"""sync doc"""


class DeltaPostgresSaver(SaverCore):
    def get_tuple(self, conn: Connection) -> None:
        """Calls ``put`` and put_writes; not aputx."""
        with self.lock:  # an ConnectionPool's
            conn.execute("x").fetchone()
            (conn.execute("x") + 1).fetchone()
            rows = [x for x in self.list()]
        if rows:
            return None
        sleep(1)
'''
