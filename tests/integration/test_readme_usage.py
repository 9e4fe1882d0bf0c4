"""The README's Usage example runs as written: its first Python block, in a new process
with ``DATABASE_URL`` set to a real, empty database (``setup()`` migrates it), twice
(the second run continues the thread), as a user would paste it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def _usage_block() -> str:
    text = README.read_text(encoding="utf-8")
    usage = text[text.index("## Usage") :]
    block: str = re.findall(r"```python\n(.*?)```", usage, re.S)[0]
    return block


def test_readme_usage_example_runs_as_written(empty_dsn: str, tmp_path: Path) -> None:
    code = _usage_block()
    assert "_messages_delta_reducer" in code  # the messages declaration users should copy
    script = tmp_path / "app.py"
    script.write_text(code, encoding="utf-8")
    env = {**os.environ, "DATABASE_URL": empty_dsn}
    for _ in range(2):
        res = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env
        )
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip().splitlines()[-1] == "echo: hello", res.stdout
