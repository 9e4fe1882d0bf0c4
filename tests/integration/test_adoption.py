"""Adoption: the official ``langgraph-checkpoint-postgres`` saver and ours share one
database, in both directions, with real graphs.

(a) The official saver creates the tables and runs graphs; our migrations adopt the
    database in place (backfilling the delta columns); every checkpoint then reads the
    same through both savers (get_tuple, list, get_delta_channel_history, get_state and
    get_state_history); our saver continues the threads and the official reads them the
    same; rows the official writes after our migration (stored_channels NULL) too.
(b) Our saver starts new threads on the same database; the official reads them the same.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph
from psycopg.rows import dict_row

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres._local.workloads import build_graph, run_turns
from langgraph_delta_postgres.migrate import discover, migrate

# --------------------------------------------------------------------------- graphs


def _append(state: list[str] | None, writes: Sequence[Any]) -> list[str]:
    out = list(state or [])
    for w in writes:
        out.extend(w if isinstance(w, list) else [w])
    return out


MyState = TypedDict(  # noqa: UP013 -- the annotation holds a live DeltaChannel
    "MyState",
    {"log": Annotated[list[str], DeltaChannel(_append, snapshot_frequency=2)], "count": int},
)


def build_mine(checkpointer: Any) -> Any:
    """Parallel branches writing one DeltaChannel, a plain int and a subgraph."""

    def inner(state: Any) -> dict[str, Any]:  # "state": the name langgraph's stub types
        return {"log": [f"inner{state['count']}"], "count": state["count"] + 1}

    sub = StateGraph(MyState)
    sub.add_node("inner", inner)
    sub.add_edge(START, "inner")
    sub.add_edge("inner", END)

    g = StateGraph(MyState)
    g.add_node("a", lambda s: {"log": [f"a{s['count']}"]})
    g.add_node("b", lambda s: {"log": [f"b{s['count']}", f"b{s['count']}'"]})
    g.add_node("sub", sub.compile())
    g.add_edge(START, "a")
    g.add_edge(START, "b")
    g.add_edge("a", "sub")
    g.add_edge("b", "sub")
    g.add_edge("sub", END)
    return g.compile(checkpointer=checkpointer)


GRAPHS = {
    "delta": lambda cp: build_graph("coding_a", cp, delta=True, snapshot_frequency=3),
    "full": lambda cp: build_graph("messages", cp, delta=False),
    "mine": build_mine,
}
WORKLOAD = {"delta": "coding_a", "full": "messages"}


def run(kind: str, graph: Any, thread: str, turns: int, start: int) -> None:
    if kind == "mine":
        for t in range(start, start + turns):
            graph.invoke({"log": [f"in{t}"], "count": t}, {"configurable": {"thread_id": thread}})
            if t % 2:
                graph.update_state({"configurable": {"thread_id": thread}}, {"log": [f"up{t}"]})
    else:
        run_turns(graph, WORKLOAD[kind], thread, turns, start=start)


# --------------------------------------------------------------------------- checks


def _official(dsn: str) -> Iterator[PostgresSaver]:
    with psycopg.connect(
        dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row
    ) as conn:
        yield PostgresSaver(conn)


def all_channels(off: PostgresSaver) -> list[str]:
    chans = {"messages", "files", "log", "count", "no_such_channel"}
    for t in off.list(None):
        chans |= set(t.checkpoint["channel_versions"])
    return sorted(chans)


def assert_same_reads(ours: DeltaPostgresSaver, off: PostgresSaver) -> int:
    """Every checkpoint of every thread and namespace reads the same through both."""
    everything = list(off.list(None))
    assert list(ours.list(None)) == everything
    chans = all_channels(off)
    namespaces = set()
    for t in everything:
        assert ours.get_tuple(t.config) == off.get_tuple(t.config), t.config
        got = ours.get_delta_channel_history(config=t.config, channels=chans)
        ref = off.get_delta_channel_history(config=t.config, channels=chans)
        assert got == ref, t.config
        conf = t.config["configurable"]
        namespaces.add((conf["thread_id"], conf["checkpoint_ns"]))
    for thread, ns in sorted(namespaces):
        latest: RunnableConfig = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
        assert ours.get_tuple(latest) == off.get_tuple(latest)
        assert list(ours.list(latest)) == list(off.list(latest))
        assert ours.get_delta_channel_history(
            config=latest, channels=chans
        ) == off.get_delta_channel_history(config=latest, channels=chans)
    assert any(ns for _, ns in namespaces), "no subgraph namespace was exercised"
    return len(everything)


def assert_same_states(
    ours: DeltaPostgresSaver, off: PostgresSaver, threads: dict[str, str]
) -> None:
    for thread, kind in threads.items():
        g_ours, g_off = GRAPHS[kind](ours), GRAPHS[kind](off)
        cfg = {"configurable": {"thread_id": thread}}
        a = g_ours.get_state(cfg, subgraphs=True)
        b = g_off.get_state(cfg, subgraphs=True)
        assert a.values and a == b, thread
        ha = list(g_ours.get_state_history(cfg))
        hb = list(g_off.get_state_history(cfg))
        assert len(ha) > 2 and ha == hb, thread
        for snap in ha[:6]:  # each historical state, loaded by id, hydrates the same
            assert g_ours.get_state(snap.config) == g_off.get_state(snap.config)


def expected_backfill(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """The delta columns computed in Python from the stored rows."""
    blobs = {
        (r["thread_id"], r["checkpoint_ns"], r["channel"], r["version"])
        for r in conn.execute(
            "SELECT thread_id, checkpoint_ns, channel, version FROM checkpoint_blobs "
            "WHERE type <> 'empty'"
        )
    }
    out = []
    for r in conn.execute(
        "SELECT thread_id, checkpoint_ns, checkpoint_id, checkpoint, metadata FROM checkpoints"
    ):
        vals = r["checkpoint"].get("channel_values") or {}
        stored = {k for k, v in vals.items() if v is not None}
        stored |= {
            ch
            for ch, ver in r["checkpoint"]["channel_versions"].items()
            if (r["thread_id"], r["checkpoint_ns"], ch, str(ver)) in blobs
        }
        counters = r["metadata"].get("counters_since_delta_snapshot")
        names = sorted(counters) if counters else None
        out.append(
            (
                r["thread_id"], r["checkpoint_ns"], r["checkpoint_id"], sorted(stored),
                names,
                [counters[n][0] for n in names] if names else None,
                [counters[n][1] for n in names] if names else None,
            )
        )
    return sorted(out)


def actual_columns(conn: psycopg.Connection[Any], where: str = "TRUE") -> list[tuple[Any, ...]]:
    return sorted(
        (
            r["thread_id"], r["checkpoint_ns"], r["checkpoint_id"], r["stored_channels"],
            r["delta_channels"], r["delta_updates"], r["delta_supersteps"],
        )
        for r in conn.execute(
            "SELECT thread_id, checkpoint_ns, checkpoint_id, stored_channels, delta_channels, "
            f"delta_updates, delta_supersteps FROM checkpoints WHERE {where}"
        )
    )


# --------------------------------------------------------------------------- the test


def test_adoption_both_directions(empty_dsn: str) -> None:
    threads = {"d1": "delta", "d2": "delta", "f1": "full", "m1": "mine", "m2": "mine",
               "switch": "full"}
    with psycopg.connect(
        empty_dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row
    ) as conn:
        off = PostgresSaver(conn)
        off.setup()
        for thread, kind in threads.items():
            run(kind, GRAPHS[kind](off), thread, 4 if kind != "delta" else 5, 0)

        # ---- adopt in place
        # (a prepare_threshold=0 connection like `conn` is covered in test_migrations)
        with psycopg.connect(empty_dsn, autocommit=True) as mconn:
            applied = migrate(mconn)
            assert [m.version for m in applied] == [m.version for m in discover()]
            assert migrate(mconn) == []
        off.setup()  # the official setup stays a no-op on the adopted database
        assert conn.execute(
            "SELECT count(*) AS n FROM checkpoints WHERE stored_channels IS NULL"
        ).fetchone()["n"] == 0  # type: ignore[index]
        expected = expected_backfill(conn)
        assert actual_columns(conn) == expected
        assert any(e[4] for e in expected), "no DeltaChannel counters were backfilled"

        with psycopg.connect(empty_dsn, autocommit=True) as conn2:
            ours = DeltaPostgresSaver(conn2)
            n = assert_same_reads(ours, off)
            assert n > 50
            assert_same_states(ours, off, threads)

            # ---- our saver continues the adopted threads; the switch thread turns its
            # fields into DeltaChannels (the stored plain values become seeds)
            for thread, kind in threads.items():
                k = "delta" if thread == "switch" else kind
                run(k, GRAPHS[k](ours), thread, 3, 10)
            threads["switch"] = "delta"
            assert_same_reads(ours, off)
            assert_same_states(ours, off, threads)
            switch = GRAPHS["delta"](ours).get_state({"configurable": {"thread_id": "switch"}})
            assert len(switch.values["messages"]) == 4 * 2 + 3 * 3  # every turn survived

            # ---- the official writes again after our migration: stored_channels NULL
            for thread, kind in (("d1", "delta"), ("m1", "mine"), ("late", "mine")):
                run(kind, GRAPHS[kind](off), thread, 3, 20)
            threads["late"] = "mine"
            late = conn.execute(
                "SELECT count(*) AS n FROM checkpoints WHERE stored_channels IS NULL"
            ).fetchone()["n"]  # type: ignore[index]
            assert late > 0
            assert_same_reads(ours, off)
            assert_same_states(ours, off, threads)

            # ---- (b) our saver starts threads; the official reads them the same
            new = {"o-delta": "delta", "o-full": "full", "o-mine": "mine"}
            for thread, kind in new.items():
                run(kind, GRAPHS[kind](ours), thread, 4, 0)
            threads.update(new)
            assert_same_reads(ours, off)
            assert_same_states(ours, off, threads)


def test_put_columns_match_backfill_definition(dsn: str) -> None:
    """The delta columns ``put`` writes equal what migration 0004 (and the history
    query's fallback) computes for the same row: stored_channels = inline non-null values
    plus channels whose named version has a non-"empty" blob."""
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        ours = DeltaPostgresSaver(conn)
        for kind in GRAPHS:
            run(kind, GRAPHS[kind](ours), f"o-{kind}", 3, 0)
        assert actual_columns(conn) == expected_backfill(conn)


@pytest.mark.parametrize("first", ["official-setup", "our-migrations"])
def test_official_setup_and_our_migrations_commute(empty_dsn: str, first: str) -> None:
    """Either order of official setup() and our migrations gives a working database that
    both savers read the same."""
    with psycopg.connect(
        empty_dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row
    ) as conn:
        off = PostgresSaver(conn)
        with psycopg.connect(empty_dsn, autocommit=True) as mconn:
            if first == "official-setup":
                off.setup()
                migrate(mconn)
            else:
                migrate(mconn)
                off.setup()
        assert conn.execute("SELECT max(v) AS v FROM checkpoint_migrations").fetchone() == {
            "v": len(off.MIGRATIONS) - 1
        }
        with psycopg.connect(empty_dsn, autocommit=True) as conn2:
            ours = DeltaPostgresSaver(conn2)
            run("mine", GRAPHS["mine"](ours), "x", 3, 0)
            run("mine", GRAPHS["mine"](off), "y", 3, 0)
            assert assert_same_reads(ours, off) > 10
            assert_same_states(ours, off, {"x": "mine", "y": "mine"})
