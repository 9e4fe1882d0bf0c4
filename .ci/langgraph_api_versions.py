"""The langgraph-api versions .ci/run tests the Agent Server wiring on, besides the one the
README's venv has: the lowest the ``server`` extra allows, the newest release and the
newest pre-release of the index, resolved now with pip (nothing hard-coded but the
extra's lower bound, read from pyproject.toml).

Prints one line per version still to test, ``VERSION LABEL...`` (a version two labels
share is tested once), and what it resolved or skipped on stderr. Exits non-zero only on
a broken pyproject (no lower bound on langgraph-api in the extra): an index that does not
answer is outside this package's control and is reported, not failed on.

Run with the README venv's python: ``.venv/bin/python .ci/langgraph_api_versions.py``.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def note(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def lowest_allowed() -> Version:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for line in extras["server"]:
        req = Requirement(line)
        if req.name == "langgraph-api":
            lows = [Version(s.version) for s in req.specifier if s.operator in (">=", "==")]
            if lows:
                return max(lows)
    raise SystemExit("pyproject.toml: the server extra has no lower bound on langgraph-api")


def newest(pre: bool) -> Version | None:
    """The version pip would install now (``--pre``: pre-releases too), or None."""
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--no-deps",
           "--ignore-installed", "--disable-pip-version-check", "--report", "-"]
    cmd += ["--pre"] if pre else []
    p = subprocess.run([*cmd, "langgraph-api"], capture_output=True, text=True, check=False)
    if p.returncode != 0:
        note(f"pip could not resolve the newest langgraph-api{' (--pre)' if pre else ''}:")
        for line in p.stderr.strip().splitlines()[-5:]:
            note(f"  {line}")
        return None
    report = json.loads(p.stdout)
    return Version(report["install"][0]["metadata"]["version"])


def main() -> None:
    installed = Version(importlib.metadata.version("langgraph-api"))
    wanted: dict[Version, list[str]] = {}
    low = lowest_allowed()
    wanted.setdefault(low, []).append("lowest-allowed")
    release = newest(pre=False)
    if release is None:
        note("NOT TESTED: the newest langgraph-api release (it could not be resolved)")
    else:
        wanted.setdefault(release, []).append("newest-release")
    pre = newest(pre=True)
    if pre is None:
        note("NOT TESTED: the newest langgraph-api pre-release (it could not be resolved)")
    elif not pre.is_prerelease:
        note(f"no langgraph-api pre-release newer than the newest release ({pre})")
    else:
        wanted.setdefault(pre, []).append("newest-pre-release")
    for version, labels in sorted(wanted.items()):
        if version == installed:
            note(f"langgraph-api {version} ({', '.join(labels)}): the README venv's, "
                 "whose suite ran tests/integration/test_agent_server.py above")
            continue
        note(f"langgraph-api {version} ({', '.join(labels)}): to test in a venv of its own")
        print(version, *labels)


if __name__ == "__main__":
    main()
