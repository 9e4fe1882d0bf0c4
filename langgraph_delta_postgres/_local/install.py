"""What to type to install an extra, in every message that says so.

The package is not on the package index yet, so ``pip install
'langgraph-delta-postgres[x]'`` fails. A message names a command that works as written:
run from a clone (an editable install, or the source tree on ``sys.path``), the clone's
absolute path, which works from any directory; installed from a wheel, ``'.[x]'`` in a clone.
The published form follows, marked as such (docs/design/release.md: what changes on release).
"""

from __future__ import annotations

import shlex
from pathlib import Path

PACKAGE = "langgraph-delta-postgres"


def source_tree() -> Path | None:
    """The clone this package is imported from, or None (installed from a wheel)."""
    root = Path(__file__).resolve().parents[2]
    try:
        text = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return None
    return root if f'name = "{PACKAGE}"' in text else None


def install_hint(extra: str) -> str:
    """``pip install ...`` for ``extra`` that works now, then the published form."""
    root = source_tree()
    if root is not None:
        now = f"pip install -e {shlex.quote(f'{root}[{extra}]')}"
    else:
        now = f"pip install '.[{extra}]' in a clone of the repository"
    return f"{now} (once published: pip install '{PACKAGE}[{extra}]')"
