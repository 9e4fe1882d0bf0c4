"""The README's Documentation list names every page of docs/ (issue 23, item 6)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_documentation_list_names_every_doc() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Documentation") :]
    section = section[: section.index("\n## ", 5)]
    listed = set(re.findall(r"\]\((docs/[\w-]+\.md)\)", section))
    docs = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert docs - listed == set(), f"missing from the README's Documentation list: {docs - listed}"
    assert listed - docs == set(), f"listed but missing: {listed - docs}"


def test_ledger_column_is_named_as_in_the_table() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ddl = (ROOT / "sql" / "migrate.sql").read_text(encoding="utf-8")
    assert "checksum TEXT NOT NULL" in ddl
    ledger = readme[readme.index("`langgraph_delta_migrations` (") :][:200]
    assert "`checksum`" in ledger and "sha256, applied" not in ledger
