"""Statements per state load under a running Agent Server (``langgraph dev``).

    langgraph-delta-pg postgres            # in one terminal; export its DSN below
    export LANGGRAPH_DELTA_PG_DSN=...
    langgraph dev --no-browser --port 2031 --config langgraph.json   # in the app dir
    python scripts/agent_server_statements.py http://127.0.0.1:2031 60

The app directory holds ``agent.py`` (``graph = build_graph("coding_a", None,
snapshot_frequency=100)`` from ``langgraph_delta_postgres._local.workloads``) and a
``langgraph.json`` whose ``checkpointer.path`` is
``langgraph_delta_postgres.agent_server.checkpointer`` (patched adapter) or a
``checkpointer.py`` that yields the saver without calling ``patch_agent_server_adapter``
(the adapter as shipped). The script runs ``turns`` turns on a new thread through the
HTTP API, then counts the statements Postgres logs (``log_statement = 'all'``, set and
reset here; the DSN must be a superuser's, as the embedded server's is) during
``GET /threads/{id}/state`` and ``POST /threads/{id}/history`` with ``limit=10``, each
call timed with the bench's ``timed``.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from collections.abc import Callable
from typing import Any

import httpx
import psycopg

from langgraph_delta_postgres.bench.timing import timed


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("url", help="the server's address, e.g. http://127.0.0.1:2031")
    p.add_argument("turns", type=int, help="turns to run on a new thread first")
    args = p.parse_args()
    url, turns = args.url, args.turns
    dsn = os.environ["LANGGRAPH_DELTA_PG_DSN"]
    with psycopg.connect(dsn, autocommit=True) as k:
        row = k.execute(
            "SELECT current_setting('data_directory') || '/' || "
            "coalesce(pg_current_logfile(), 'log')"
        ).fetchone()
        assert row is not None
        logfile = str(row[0])
        k.execute("ALTER SYSTEM SET log_statement = 'all'")
        k.execute("SELECT pg_reload_conf()")
    try:
        c = httpx.Client(base_url=url, timeout=300)
        tid = c.post("/threads", json={}).json()["thread_id"]
        for t in range(turns):
            msg = {"type": "human", "content": f"turn {t}", "id": f"user-{t}"}
            c.post(
                f"/threads/{tid}/runs/wait",
                json={"assistant_id": "agent", "input": {"messages": [msg]}},
            ).raise_for_status()

        def count(fn: Callable[[], Any]) -> tuple[int, float]:
            time.sleep(0.5)
            start = os.path.getsize(logfile)
            ms = timed(fn) * 1000
            time.sleep(0.5)
            with open(logfile, "rb") as f:
                f.seek(start)
                text = f.read().decode(errors="replace")
            return len(re.findall(r"LOG:  (?:statement|execute [^:]*):", text)), round(ms, 1)

        for name, fn in (
            ("GET state", lambda: c.get(f"/threads/{tid}/state").raise_for_status()),
            (
                "POST history limit=10",
                lambda: c.post(f"/threads/{tid}/history", json={"limit": 10}).raise_for_status(),
            ),
        ):
            print(f"{name}: (statements, ms) x3 = {[count(fn) for _ in range(3)]}")
    finally:
        with psycopg.connect(dsn, autocommit=True) as k:
            k.execute("ALTER SYSTEM RESET log_statement")
            k.execute("SELECT pg_reload_conf()")


if __name__ == "__main__":
    main()
