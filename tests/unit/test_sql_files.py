"""The SQL files: every block is used by the package, every name the package uses
exists, every file has a header, and every block renders for any schema."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from psycopg import sql

import langgraph_delta_postgres
from langgraph_delta_postgres._sql import (
    Queries,
    data_dir,
    fragments,
    raw_blocks,
    render,
    sql_files,
)

PACKAGE = Path(langgraph_delta_postgres.__file__).parent
SQL_DIR = Path(str(data_dir("sql")))
# dotted string literals in the package that are documentation, not query keys
NOT_KEYS = {"file.block"}
#: dotted literals that are file names (pyproject.toml, postmaster.pid, standby.signal),
#: not query keys
FILE_SUFFIXES = (".py", ".sql", ".toml", ".pid", ".signal")


def all_keys() -> dict[str, str]:
    """``{"file.block" (or "file" for a one-statement file): SQL text}``."""
    keys = {}
    for f in sql_files():
        stem = f.removesuffix(".sql")
        blocks = raw_blocks(f)
        if list(blocks) == [stem] and "-- name:" not in (SQL_DIR / f).read_text():
            keys[stem] = blocks[stem]
        else:
            for name, text in blocks.items():
                keys[f"{stem}.{name}"] = text
    return keys


def referenced() -> set[str]:
    """String literals of the package source that name a query."""
    stems = {f.removesuffix(".sql") for f in sql_files()}
    single = {k for k in all_keys() if "." not in k}  # one-statement files
    found = set()
    # the modules of the flat layout before the subpackages (the benchmark's own, then
    # under _bench/, were not read)
    modules = [*PACKAGE.glob("*.py"), *PACKAGE.glob("_ops/*.py"), *PACKAGE.glob("cli/*.py"),
               *PACKAGE.glob("replicas/*.py"),
               PACKAGE / "bench" / "main.py"]
    for py in modules:
        for lit in re.findall(r"""["']([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)?)["']""",
                              py.read_text(encoding="utf-8")):
            if "." in lit and lit not in NOT_KEYS:
                if lit.split(".")[0] in stems or not lit.endswith(FILE_SUFFIXES):
                    found.add(lit)
            elif lit in single:
                found.add(lit)
    return found


def test_sql_files_exist() -> None:
    assert sql_files(), "no sql/*.sql files"
    assert set(sql_files()) >= {"checkpoints.sql", "delta_history.sql", "maintenance.sql",
                                "migrate.sql", "write.sql"}


def test_every_block_is_used() -> None:
    unused = sorted(set(all_keys()) - referenced())
    assert unused == [], f"SQL blocks no package code references: {unused}"


def test_every_referenced_name_exists() -> None:
    refs = {r for r in referenced() if r.split(".")[0] in {f[:-4] for f in sql_files()}}
    missing = sorted(refs - set(all_keys()))
    assert missing == [], f"package code references SQL blocks that don't exist: {missing}"
    # dotted literals that name no SQL file at all are typos of a file name
    stems = {f[:-4] for f in sql_files()}
    strays = sorted(r for r in referenced() if "." in r and r.split(".")[0] not in stems)
    assert strays == [], f"query keys naming no sql file: {strays}"


@pytest.mark.parametrize("filename", sql_files())
def test_file_has_header_comment(filename: str) -> None:
    lines = (SQL_DIR / filename).read_text(encoding="utf-8").splitlines()
    assert lines and lines[0].startswith("-- "), f"{filename}: no header comment"
    stem = filename.removesuffix(".sql")
    assert lines[0].startswith(f"-- {stem}"), f"{filename}: header should name the file"


@pytest.mark.parametrize("filename", sql_files())
def test_blocks_are_nonempty_and_use_named_parameters(filename: str) -> None:
    for name, text in raw_blocks(filename).items():
        assert text.strip(), f"{filename}:{name} is empty"
        assert not re.search(r"%s(?!\w)", text.replace("%%", "")), (
            f"{filename}:{name} uses a positional %s parameter"
        )
        assert not re.search(r";\s*\S", text), f"{filename}:{name} holds several statements"


@pytest.mark.parametrize("schema", [None, "lg", "Odd \"Schema\" name"])
def test_every_block_renders(schema: str | None) -> None:
    q = Queries(schema)
    for key in all_keys():
        rendered = q[key].as_string(None)
        assert "{s}" not in rendered and "{schema}" not in rendered, key
        if schema is not None and "{s}" in all_keys()[key]:
            assert sql.Identifier(schema).as_string(None) + "." in rendered, key
        if schema is None:
            assert '"lg"' not in rendered


@pytest.mark.parametrize("schema", [None, "lg"])
def test_every_migration_renders(schema: str | None) -> None:
    for f in sorted(Path(str(data_dir("migrations"))).glob("*.sql")):
        rendered = render(f.read_text(encoding="utf-8"), schema).as_string(None)
        assert "{s}" not in rendered
        if schema:
            assert '"lg".checkpoint' in rendered, f.name


def test_headers_name_files_that_exist() -> None:
    """Every ``.py`` file a SQL or migration header names exists: a path from the
    repository root (``scripts/``, ``tests/``), from the package (``_ops/write.py``), or a
    module name found once in the package (``migrate.py``). Headers outlive moves (issue
    38, item 7: two named modules that had moved)."""
    root = PACKAGE.parent
    texts = [(f, (SQL_DIR / f).read_text(encoding="utf-8")) for f in sql_files()]
    texts += [(p.name, p.read_text(encoding="utf-8")) for p in root.glob("migrations/*.sql")]
    missing = []
    for name, text in texts:
        for ref in sorted(set(re.findall(r"[\w/.-]*\w\.py\b", text))):
            candidates = [root / ref, PACKAGE / ref]
            if "/" not in ref:
                candidates += list(PACKAGE.rglob(ref))
            if not any(c.is_file() for c in candidates):
                missing.append(f"{name}: {ref}")
    assert not missing, f"SQL headers name files that do not exist: {missing}"


def test_every_fragment_is_included_and_every_include_exists() -> None:
    """A ``-- fragment:`` block (sql/rules.sql) is included by some statement, and every
    ``@FILE.NAME(...)`` line names a fragment that exists (raw_blocks raises otherwise)
    and leaves no ``@`` line or ``$param`` in what is sent."""
    included: set[str] = set()
    for f in sql_files():
        text = (SQL_DIR / f).read_text(encoding="utf-8")
        included |= {f"{m[0]}.{m[1]}" for m in re.findall(r"^\s*@(\w+)\.(\w+)\(", text, re.M)}
        for name, block in raw_blocks(f).items():
            assert not re.search(r"^\s*@\w", block, re.M), f"{f}:{name} keeps an include line"
            assert not re.search(r"\$[a-z]", block), f"{f}:{name} keeps a fragment parameter"
    defined = {f"{f.removesuffix('.sql')}.{n}" for f in sql_files() for n in fragments(f)}
    assert defined, "no fragments"
    assert sorted(defined - included) == [], "fragments no statement includes"
    assert sorted(included - defined) == [], "includes of fragments that do not exist"


def test_an_included_fragment_is_indented_and_its_parameters_replaced() -> None:
    """The seed rule comes into delta_history.walk as if written there: indented as the
    ``@`` line, ``$row`` and ``$ch`` replaced (the statements are byte for byte those of
    before the fragment, issue 39)."""
    walk = raw_blocks("delta_history.sql")["walk"]
    frag = fragments("rules.sql")["stores_value"]
    assert frag.params == ("$row", "$ch")
    expected = "\n".join(
        " " * 22 + ln
        for ln in frag.text.replace("$row", "p").replace("$ch", "ch").splitlines()
    )
    assert expected in walk
    assert "jsonb_typeof(c.checkpoint -> 'channel_values' -> s.ch)" in walk
