"""Every ``pip install`` the README, docs/ and the CLI's messages tell a user to run works
from a clone (issue 23): the package is not on the index yet, so a command naming
``langgraph-delta-postgres`` would fail. The published form may stand beside one, after
"once published:".

The static tests run by default. ``test_each_command_runs_from_the_clone`` runs every
distinct command with ``--dry-run`` (pip resolves it and builds the clone's metadata, as
for a real install, without installing: about 8 s each, so it is marked slow; ``.ci/run``
runs it in its wheel-check block). The wheel check (scripts/check_wheel.sh) installs the
built wheel with the ``embedded`` extra for real.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from langgraph_delta_postgres._local import install as _install
from langgraph_delta_postgres._local.install import PACKAGE, install_hint

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = ROOT / "langgraph_delta_postgres"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
EXTRAS = set(PYPROJECT["project"]["optional-dependencies"])
PUBLISHED = "once published:"
# a command: from "pip install" to the end of its code span, comment or line
COMMAND = re.compile(r"pip install(?P<args>[^`#\n&)]*)")
HINT_CALL = re.compile(r"install_hint\(\s*['\"](\w+)['\"]\s*\)")


def doc_commands() -> list[tuple[str, str, bool]]:
    """(where, command, published) for every ``pip install`` in README.md and docs/
    (docs/design/ included)."""
    found = []
    # docs/design/release.md is left out: its commands are the publishing steps themselves
    # (install from TestPyPI, twine), run at release time, not by a user of a clone
    release = ROOT / "docs" / "design" / "release.md"
    assert release.is_file()
    docs = [p for p in sorted((ROOT / "docs").rglob("*.md")) if p != release]
    for path in [ROOT / "README.md", *docs]:
        text = path.read_text(encoding="utf-8")
        for m in COMMAND.finditer(text):
            if not [a for a in shlex.split(m.group("args").strip(" `")) if a != "-e"]:
                continue  # prose naming the command itself ("every `pip install` below")
            before = " ".join(text[max(0, m.start() - 40) : m.start()].split())
            line = text.count("\n", 0, m.start()) + 1
            found.append(
                (f"{path.relative_to(ROOT).as_posix()}:{line}",
                 f"pip install {m.group('args').strip(' `')}".strip(),
                 before.endswith(PUBLISHED) or before.endswith(PUBLISHED + " `"))
            )
    return found


def cli_commands() -> list[tuple[str, str]]:
    """(extra, command) for every install hint the package's messages print."""
    extras = set()
    for path in PACKAGE_DIR.rglob("*.py"):
        extras.update(HINT_CALL.findall(path.read_text(encoding="utf-8")))
    return [(x, install_hint(x).split(" (", 1)[0]) for x in sorted(extras)]


def local_extras(command: str) -> list[str]:
    """The extras a from-clone command installs of this package ('.[x]', '/path[x]')."""
    out: list[str] = []
    for arg in shlex.split(command)[2:]:
        m = re.fullmatch(r"(\.|/.*)\[([\w,]+)\]", arg)
        if m:
            out += m.group(2).split(",")
    return out


def test_doc_commands_work_from_a_clone() -> None:
    cmds = doc_commands()
    assert len(cmds) >= 10, cmds  # README quickstart, usage, server, retention, bench, docs
    for where, cmd, published in cmds:
        if published:
            assert f"'{PACKAGE}[" in cmd, (where, cmd)
            continue
        assert PACKAGE not in cmd, f"{where}: {cmd!r} fails until the package is published"
        for extra in local_extras(cmd):
            assert extra in EXTRAS, (where, cmd)
    # every published form stands beside a from-clone form of the same extras
    now = {tuple(local_extras(c)) for _, c, p in cmds if not p}
    for where, cmd, published in cmds:
        if published:
            extras = re.findall(rf"'{PACKAGE}\[(\w+)\]'", cmd)
            assert tuple(extras) in now, (where, cmd)


def test_cli_hints_work_from_a_clone() -> None:
    hints = cli_commands()
    assert {x for x, _ in hints} >= {"embedded", "demo", "bench"}  # prune needs no extra
    for extra, cmd in hints:
        assert extra in EXTRAS
        assert PACKAGE not in cmd
        assert local_extras(cmd) == [extra]
        assert f"once published: pip install '{PACKAGE}[{extra}]'" in install_hint(extra)
    # no message spells an install command by hand (but for third-party packages)
    for path in PACKAGE_DIR.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if path != PACKAGE_DIR / "_local" / "install.py":
            assert f"pip install '{PACKAGE}" not in text, path


def test_hint_outside_a_clone_says_where_to_run_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_install, "source_tree", lambda: None)
    assert install_hint("cli") == (
        "pip install '.[cli]' in a clone of the repository "
        f"(once published: pip install '{PACKAGE}[cli]')"
    )


def _distinct_commands() -> list[str]:
    cmds = [c for _, c, p in doc_commands() if not p] + [c for _, c in cli_commands()]
    return sorted(set(cmds))


@pytest.mark.slow
@pytest.mark.parametrize("command", _distinct_commands())
def test_each_command_runs_from_the_clone(command: str) -> None:
    argv = [sys.executable, "-m", "pip", *shlex.split(command)[1:], "--dry-run", "-q"]
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert p.returncode == 0, f"{command}: {p.stderr[-2000:]}"
