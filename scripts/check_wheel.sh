#!/usr/bin/env bash
# The release as a user gets it (docs/design/release.md): build the sdist and the wheel (the wheel
# from the sdist, as `python -m build` does), check that the wheel carries the SQL files
# and the migrations, install the wheel with the `embedded` extra into a fresh venv, and
# run it from a directory outside any source tree: `--version`, `postgres` (the embedded
# server), `migrate`, `status`, and a DeltaChannel graph run twice through the installed
# package (the second run resumes the thread: the history statement is read from the
# wheel's sql/). Prints each step's time. Usage: scripts/check_wheel.sh [OUTDIR]
# (OUTDIR keeps the built sdist and wheel; default: a temporary directory, removed).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d /tmp/lgdp-wheel-XXXXXX)"
chmod 755 "$WORK"  # as root the embedded server runs as the `pgserver` user: it reads the venv
PG_PID=""
cleanup() {
  if [ -n "$PG_PID" ]; then kill "$PG_PID" 2>/dev/null || true; wait "$PG_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
DIST="${1:-$WORK/dist}"
mkdir -p "$DIST"
export PIP_DISABLE_PIP_VERSION_CHECK=1
T0=$SECONDS
step() { echo "== wheel check: $* ($((SECONDS - T0)) s) =="; }

step "build sdist and wheel"
python3 -m venv "$WORK/tools"
"$WORK/tools/bin/pip" install -q 'build>=1.2' >"$WORK/pip.log" 2>&1 || { cat "$WORK/pip.log"; exit 1; }
rm -f "$DIST"/langgraph_delta_postgres-*
"$WORK/tools/bin/python" -m build --outdir "$DIST" "$ROOT" >"$WORK/build.log" 2>&1 \
  || { cat "$WORK/build.log"; exit 1; }
WHEEL="$(ls "$DIST"/langgraph_delta_postgres-*.whl)"
SDIST="$(ls "$DIST"/langgraph_delta_postgres-*.tar.gz)"
echo "$(basename "$SDIST") $(basename "$WHEEL")"

step "wheel and sdist contents"
python3 - "$ROOT" "$WHEEL" "$SDIST" <<'PY'
import sys, tarfile, zipfile
from pathlib import Path
root, wheel, sdist = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
names = set(zipfile.ZipFile(wheel).namelist())
tar = {n.split("/", 1)[1] for n in tarfile.open(sdist).getnames() if "/" in n}
for folder in ("sql", "migrations"):
    files = sorted(p.name for p in (root / folder).glob("*.sql"))
    assert files, folder
    missing = [f for f in files if f"langgraph_delta_postgres/{folder}/{f}" not in names]
    assert not missing, f"the wheel lacks {folder}/: {missing}"
    missing = [f for f in files if f"{folder}/{f}" not in tar]
    assert not missing, f"the sdist lacks {folder}/: {missing}"
    print(f"{folder}/: {len(files)} files in the wheel and the sdist")
assert "langgraph_delta_postgres/py.typed" in names, "py.typed"
assert not any(n.startswith("tests/") for n in names), "the wheel ships no tests"
PY

step "install the wheel with the embedded extra into a fresh venv"
python3 -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install -q "$WHEEL[embedded]" >"$WORK/pip.log" 2>&1 \
  || { cat "$WORK/pip.log"; exit 1; }
BIN="$WORK/venv/bin"
mkdir "$WORK/run" && cd "$WORK/run"  # no source tree here or on sys.path
unset PYTHONPATH DATABASE_URL
"$BIN/python" - <<'PY'
import langgraph_delta_postgres as m
from langgraph_delta_postgres._local.install import source_tree
assert "site-packages" in m.__file__, m.__file__  # the wheel's copy, not a clone's
assert source_tree() is None
print("imported from", m.__file__)
PY

step "langgraph-delta-pg --version"
"$BIN/langgraph-delta-pg" --version | tee "$WORK/version"
grep -qx "langgraph-delta-pg $("$BIN/python" -c 'import langgraph_delta_postgres as m; print(m.__version__)')" "$WORK/version"

step "langgraph-delta-pg postgres"
mkfifo "$WORK/dsn"
"$BIN/langgraph-delta-pg" postgres >"$WORK/dsn" 2>"$WORK/postgres.log" &
PG_PID=$!
exec 3<"$WORK/dsn"
read -r -t 120 DSN <&3 || { cat "$WORK/postgres.log"; exit 1; }
echo "$DSN"

step "langgraph-delta-pg migrate / status"
"$BIN/langgraph-delta-pg" migrate --dsn "$DSN"
"$BIN/langgraph-delta-pg" status --dsn "$DSN" | tail -1

step "a DeltaChannel graph through the installed package"
cat >"$WORK/run/graph.py" <<'PY'
import sys
from typing import Annotated, TypedDict

from langgraph.channels.delta import DeltaChannel
from langgraph.graph import START, StateGraph

from langgraph_delta_postgres import DeltaPostgresSaver


def append(state: list, writes: list) -> list:
    return state + [m for w in writes for m in (w if isinstance(w, list) else [w])]


class State(TypedDict):
    messages: Annotated[list, DeltaChannel(append, snapshot_frequency=3)]


builder = StateGraph(State)
builder.add_node("chat", lambda s: {"messages": [f"echo: {s['messages'][-1]}"]})
builder.add_edge(START, "chat")
with DeltaPostgresSaver.from_conn_string(sys.argv[1]) as saver:
    saver.setup()
    graph = builder.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "wheel"}}
    for word in sys.argv[2:]:
        graph.invoke({"messages": [word]}, config)
    print(graph.get_state(config).values["messages"])
PY
"$BIN/python" graph.py "$DSN" a b c d
"$BIN/python" graph.py "$DSN" e | tee "$WORK/state"
grep -q "'a', 'echo: a', 'b', 'echo: b', 'c', 'echo: c', 'd', 'echo: d', 'e', 'echo: e'" "$WORK/state"
"$BIN/langgraph-delta-pg" inspect --thread wheel --dsn "$DSN" >"$WORK/inspect.txt"
head -3 "$WORK/inspect.txt"

step "stop the server"
kill "$PG_PID" && wait "$PG_PID" && PG_PID=""
exec 3<&-
step "passed"
