"""Generate the synchronous modules from their asyncio sources (issue 39, item 1).

The async modules are the source: each sync module of SOURCES is written from one of them,
token by token, so the layout and the comments stay as written: ``async def`` / ``async
with`` / ``async for`` lose ``async``, ``await`` goes, and the names of NAMES (and the
same words in strings and comments) become their sync names. Two directives, in comments
of the source, say what the sync module has differently:

* a line ending in ``# async-only`` is left out, and so are the lines between
  ``# <async-only>`` and ``# </async-only>``;
* the lines between ``# <sync-only>`` and ``# </sync-only>`` are commented out in the
  source and written uncommented (their first ``# `` removed).

Where a sync body differs in substance, the source calls a primitive of ``_acompat.py``,
which has both forms under the two names. Imports the sync module no longer uses go, and
the imports are sorted, and a loop of yields becomes ``yield from`` (``ruff check
--fix --select I,F401,UP028``). Each generated file starts
with a line naming its source; a hand edit is lost at the next run, and ``--check`` (run
by ``.ci/run``) fails on it.

    python scripts/async_to_sync.py           # write the sync modules
    python scripts/async_to_sync.py --check   # exit 1 if one differs from what it would be
"""

from __future__ import annotations

import argparse
import difflib
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = "langgraph_delta_postgres"

#: (source, generated), relative to the repository
SOURCES: list[tuple[str, str]] = [
    (f"{PKG}/aio.py", f"{PKG}/saver.py"),
    (f"{PKG}/_driver_async.py", f"{PKG}/_driver_sync.py"),
    (f"{PKG}/_migrate_async.py", f"{PKG}/_migrate_sync.py"),
    (f"{PKG}/replicas/_async.py", f"{PKG}/replicas/_sync.py"),
]

#: async name -> sync name (a NAME token, or a whole word of a string or comment);
#: None: the name goes, with the comma after it (a base class of the async class only)
NAMES: dict[str, str | None] = {
    # psycopg, psycopg_pool, the standard library
    "AsyncConnection": "Connection",
    "AsyncConnectionPool": "ConnectionPool",
    "AsyncCursor": "Cursor",
    "AsyncPipeline": "Pipeline",
    "AsyncIterator": "Iterator",
    "asynccontextmanager": "contextmanager",
    "aclose": "close",
    # _acompat: one name per primitive and form
    "ALock": "Lock",
    "AEvent": "Event",
    "APOOL_OPEN_AT_INIT": "POOL_OPEN_AT_INIT",
    "asleep": "sleep",
    "AMETHOD_PREFIX": "METHOD_PREFIX",
    "_migrate_async": "_migrate_sync",
    "_driver_async": "_driver_sync",
    # the package
    "AsyncConn": "SyncConn",
    "AsyncDriver": "SyncDriver",
    "aio": "saver",
    "AsyncDeltaPostgresSaver": "DeltaPostgresSaver",
    "AsyncReplicaSaver": "ReplicaSaver",
    "AsyncRoutingSaver": "RoutingSaver",
    "atoken": "token",
    "SyncBridge": None,
    "adrive": "drive",
    "aexecute_stmt": "execute_stmt",
    "ahold": "hold",
    "acheck_if_idle": "check_if_idle",
    "amark_returned": "mark_returned",
    "amigrate": "migrate",
    "aget_tuple": "get_tuple",
    "alist": "list",
    "aput": "put",
    "aput_writes": "put_writes",
    "adelete_thread": "delete_thread",
    "adelete_for_runs": "delete_for_runs",
    "acopy_thread": "copy_thread",
    "aprune": "prune",
    "aget_delta_channel_keepset": "get_delta_channel_keepset",
    "aget_delta_channel_history": "get_delta_channel_history",
}

_WORD = re.compile(
    r"\b(" + "|".join(sorted((re.escape(n) for n in NAMES if NAMES[n]), key=len, reverse=True))
    + r")\b"
)


def _directives(text: str) -> str:
    """Apply the line directives: drop async-only lines, uncomment sync-only ones."""
    out: list[str] = []
    mode = ""
    for n, line in enumerate(text.splitlines(keepends=True), 1):
        mark = line.strip()
        if mark in ("# <async-only>", "# <sync-only>"):
            if mode:
                raise SystemExit(f"line {n}: {mark} inside <{mode}>")
            mode = mark[3:-1]
            continue
        if mark in ("# </async-only>", "# </sync-only>"):
            if mode != mark[4:-1]:
                raise SystemExit(f"line {n}: {mark} without its opening")
            mode = ""
            continue
        if mode == "async-only" or line.rstrip().endswith("# async-only"):
            continue
        if mode == "sync-only":
            m = re.fullmatch(r"(\s*)#( ?)(.*)", line.rstrip("\n"))
            if m is None:
                raise SystemExit(f"line {n}: a <sync-only> line must be a comment")
            out.append((m[1] + m[3]).rstrip() + "\n")
            continue
        out.append(line)
    if mode:
        raise SystemExit(f"<{mode}> not closed")
    return "".join(out)


def _words(text: str) -> str:
    return _WORD.sub(lambda m: NAMES[m[1]] or m[1], text)


def _bare_close(toks: list[tokenize.TokenInfo], i: int) -> int | None:
    """The index of the ``)`` closing ``toks[i]`` if what they enclose is ``await`` and a
    primary (names, dots, calls, subscripts), which needs no parentheses once the await
    goes; else None."""
    depth = 0
    for j in range(i + 2, len(toks)):
        tok = toks[j]
        if tok.string in ("(", "[", "{"):
            depth += 1
        elif tok.string in (")", "]", "}"):
            if depth == 0:
                return j if tok.string == ")" else None
            depth -= 1
        elif depth == 0 and not (tok.type == tokenize.NAME or tok.string == "."):
            return None
        elif depth == 0 and tok.string in ("await", "async", "lambda", "not", "and", "or",
                                           "if", "else", "for", "in", "is"):
            return None
    return None


def convert(text: str) -> str:
    """The sync text of an async module's text (before the imports are tidied)."""
    text = _directives(text)
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def at(pos: tuple[int, int]) -> int:
        return starts[pos[0] - 1] + pos[1]

    toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
    edits: list[tuple[int, int, str]] = []
    for i, tok in enumerate(toks):
        if tok.string == "(" and toks[i + 1].string == "await":
            close = _bare_close(toks, i)
            if close is not None:  # (await x.y(...)) -> x.y(...): the parentheses go
                edits.append((at(tok.start), at(tok.end), ""))
                edits.append((at(toks[close].start), at(toks[close].end), ""))
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if tok.type == tokenize.NAME:
            if tok.string == "async" and nxt is not None and nxt.string in ("def", "with", "for"):
                edits.append((at(tok.start), at(nxt.start), ""))
            elif tok.string == "await" and nxt is not None:
                edits.append((at(tok.start), at(nxt.start), ""))
            elif tok.string in NAMES:
                new = NAMES[tok.string]
                if new is None:
                    comma = toks[i + 1]
                    after = toks[i + 2]
                    if comma.string != ",":
                        raise SystemExit(f"{tok.string} at {tok.start}: no comma follows")
                    edits.append((at(tok.start), at(after.start), ""))
                else:
                    edits.append((at(tok.start), at(tok.end), new))
        elif tok.type in (tokenize.STRING, tokenize.COMMENT):
            new_text = _words(tok.string)
            if new_text != tok.string:
                edits.append((at(tok.start), at(tok.end), new_text))
    out = []
    last = 0
    for start, end, new in sorted(edits):
        out.append(text[last:start])
        out.append(new)
        last = end
    out.append(text[last:])
    return "".join(out).rstrip("\n") + "\n"


def generate(source: str, target: str) -> str:
    """The text of ``target`` generated from ``source`` (both relative to the repository)."""
    body = convert((ROOT / source).read_text(encoding="utf-8"))
    tidied = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--quiet", "--fix-only", "--exit-zero",
         "--select", "I,F401,UP028", "--unsafe-fixes", "--stdin-filename", str(ROOT / target), "-"],
        input=body, capture_output=True, text=True, cwd=ROOT, check=True,
    ).stdout
    header = (
        f"# Generated from {source.removeprefix(PKG + '/')} by scripts/async_to_sync.py: "
        "do not edit.\n"
        "# Edit the source, then run: python scripts/async_to_sync.py\n"
    )
    return header + tidied


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="Sources: "
        + ", ".join(f"{s} -> {t}" for s, t in SOURCES),
    )
    parser.add_argument(
        "--check", action="store_true",
        help="write nothing; exit 1 if a generated file differs from what its source gives",
    )
    args = parser.parse_args()
    differ = 0
    for source, target in SOURCES:
        want = generate(source, target)
        path = ROOT / target
        have = path.read_text(encoding="utf-8") if path.exists() else ""
        if have == want:
            continue
        if args.check:
            differ += 1
            sys.stdout.writelines(difflib.unified_diff(
                have.splitlines(keepends=True), want.splitlines(keepends=True),
                f"{target} (as committed)", f"{target} (generated from {source})",
            ))
        else:
            path.write_text(want, encoding="utf-8")
            print(f"wrote {target} (from {source})")
    if differ:
        print(f"{differ} generated file(s) differ from their source: run "
              "python scripts/async_to_sync.py (and edit the async source, not the sync file)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
