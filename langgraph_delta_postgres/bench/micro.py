"""Micro-benchmarks of ``get_delta_channel_history``: ours vs the official saver on the
same rows, at several network round-trip times."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from langchain_core.runnables import RunnableConfig
from psycopg.rows import dict_row

from .. import DeltaPostgresSaver
from .._cache import NO_PLAN
from .._local.workloads import build_graph, run_turns
from .proxy import LatencyProxy
from .rows import Branch, copy_threads, write_chain
from .savers import Savers, StatementCounter
from .timing import Interleaved

CHANNELS = ("messages", "files", "notes", "todos")


def _cfg(thread_id: str, checkpoint_id: str | None) -> RunnableConfig:
    c: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id:
        c["checkpoint_id"] = checkpoint_id
    return {"configurable": c}


def _counts(net: Savers, which: str, call: Callable[[], Any]) -> dict[str, int]:
    return count_call(net.counters[which], net.meter, call)


def count_call(counter: StatementCounter, meter: LatencyProxy, call: Callable[[], Any]
               ) -> dict[str, int]:
    """Statements, round trips and bytes of one call, steady state: the smallest of
    three calls after a warm-up (a call that crosses psycopg's ``prepare_threshold``
    pays one extra round trip to prepare, once)."""
    call()
    best: dict[str, int] | None = None
    for _ in range(3):
        n0, c0 = counter.n, meter.counts()
        call()
        time.sleep(0.005)  # let the proxy's reader threads account for the last chunk
        d = meter.counts() - c0
        got = {
            "statements": counter.n - n0,
            "round_trips": d.round_trips,
            "bytes_to_client": d.down_bytes,
            "bytes_to_server": d.up_bytes,
        }
        if best is None or got["round_trips"] < best["round_trips"]:
            best = got
    assert best is not None
    return best


def measure_history(
    net: Savers,
    thread_id: str,
    checkpoint_id: str | None,
    channels: Sequence[str],
    rounds: int,
) -> dict[str, Any]:
    """Both savers' ``get_delta_channel_history`` on one target, every RTT, interleaved,
    with the floor (deserializing the returned values into a list + one ``SELECT 1``)."""
    cfg = _cfg(thread_id, checkpoint_id)
    chs = list(channels)
    ours0 = net.by_rtt["0"]["ours"]
    got_ours = ours0.get_delta_channel_history(config=cfg, channels=chs)
    got_off = net.by_rtt["0"]["official"].get_delta_channel_history(config=cfg, channels=chs)
    # The raw rows our statement returns, to time their deserialization alone.
    conn = ours0.conn
    with conn.cursor(binary=True, row_factory=dict_row) as cur:
        cur.execute(
            ours0.history_query(),
            {
                "thread_id": thread_id,
                "checkpoint_ns": "",
                "checkpoint_id": checkpoint_id,
                "channels": chs,
                "max_depth": ours0.max_history_depth,
                **NO_PLAN.params(),  # what a saver without a cache sends
            },
        )
        rows = cur.fetchall()
        raw = [(r["type"], r["blob"]) for r in rows if r["type"] is not None]
        # The seed blobs' primary keys (channel, version), for the lower bound below.
        seeded = [(r["channel"], r["checkpoint_id"]) for r in rows
                  if r["kind"] == "s" and r["blob"] is not None]
        cur.execute(
            "SELECT k.channel, c.checkpoint -> 'channel_versions' ->> k.channel AS version "
            "FROM unnest(%(chs)s::text[], %(cids)s::text[]) AS k(channel, checkpoint_id) "
            "JOIN checkpoints AS c ON c.thread_id = %(tid)s AND c.checkpoint_ns = '' "
            "AND c.checkpoint_id = k.checkpoint_id",
            {"chs": [s[0] for s in seeded], "cids": [s[1] for s in seeded], "tid": thread_id},
        )
        seed_keys = [(r["channel"], r["version"]) for r in cur.fetchall()]
    loads = ours0.serde.loads_typed

    def deserialize() -> list[Any]:
        # The values are kept, as a caller keeps them: dropping each one at once lets the
        # allocator reuse one hot block and skips the garbage collector's passes over a
        # growing result, which measured 3.5 ms (20%) faster at 2,000 writes than what a
        # caller can have.
        return [loads(t) for t in raw]

    out: dict[str, Any] = {
        "thread_id": thread_id,
        "target_id": checkpoint_id,
        "channels": chs,
        "writes_returned": {ch: len(got_ours[ch]["writes"]) for ch in chs},
        "seeded": {ch: "seed" in got_ours[ch] for ch in chs},
        "results_equal": _same(got_ours, got_off),
        "blobs_returned": len(raw),
        "blob_bytes_returned": sum(len(b) for _, b in raw),
        "counts": {
            "ours": _counts(net, "ours", lambda: net.count["ours"].get_delta_channel_history(
                config=cfg, channels=chs)),
            "official": _counts(net, "official", lambda: net.count["official"]
                                .get_delta_channel_history(config=cfg, channels=chs)),
        },
        "rtt": {},
    }
    for label, by_kind in net.by_rtt.items():
        o, f = by_kind["ours"], by_kind["official"]
        sel = o.conn

        def select1(c: psycopg.Connection[Any] = sel) -> None:
            c.execute("SELECT 1").fetchall()

        def seeds(c: psycopg.Connection[Any] = sel) -> None:
            # The seed blobs alone, by primary key, in one statement: what any saver must
            # read whatever its walk (decompression and transfer included).
            with c.cursor(binary=True) as cur:
                cur.execute(
                    "SELECT b.type, b.blob FROM checkpoint_blobs AS b "
                    "JOIN unnest(%(chs)s::text[], %(vers)s::text[]) AS k(channel, version) "
                    "ON b.channel = k.channel AND b.version = k.version "
                    "WHERE b.thread_id = %(tid)s AND b.checkpoint_ns = ''",
                    {"chs": [k[0] for k in seed_keys], "vers": [k[1] for k in seed_keys],
                     "tid": thread_id},
                )
                cur.fetchall()

        iv = Interleaved()
        iv.run(
            {
                "ours": lambda o=o: o.get_delta_channel_history(config=cfg, channels=chs),
                "official": lambda f=f: f.get_delta_channel_history(config=cfg, channels=chs),
                "select1": select1,
                "seeds": seeds,
                "deserialize": deserialize,
            },
            rounds,
        )
        iv.samples["floor"] = [a + b for a, b in zip(
            iv.samples["select1"], iv.samples["deserialize"], strict=True)]
        iv.samples["bound"] = [a + b for a, b in zip(
            iv.samples["seeds"], iv.samples["deserialize"], strict=True)]
        out["rtt"][label] = {
            "ours": iv.stats("ours"),
            "official": iv.stats("official"),
            "select1": iv.stats("select1"),
            "deserialize": iv.stats("deserialize"),
            "floor": iv.stats("floor"),
            "seeds": iv.stats("seeds"),
            "bound": iv.stats("bound"),
            "ratio_official_bound": iv.ratio("official", "bound"),
            "ratio_ours_official": iv.ratio("ours", "official"),
            "ratio_official_ours": iv.ratio("official", "ours"),
            "ratio_ours_floor": iv.ratio("ours", "floor"),
        }
    return out


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:
        return False


@dataclass
class MicroScale:
    depths: tuple[int, ...]
    channel_depth: int
    fork_main: int
    forks: int
    fork_len: int
    other_threads: int
    headline_a_turns: int
    headline_a_freq: int
    headline_b_turns: int
    headline_b_freq: int
    rounds: int
    deep_rounds: int


def run_micro(
    dsn: str,
    net: Savers,
    scale: MicroScale,
    log: Callable[[str], None],
) -> dict[str, Any]:
    from langgraph.checkpoint.postgres import PostgresSaver

    res: dict[str, Any] = {"scale": vars(scale).copy()}
    # the rows are written by savers from_conn_string opened (each chain in one
    # transaction of its saver's connection); the copies of threads on a connection of
    # their own
    with DeltaPostgresSaver.from_conn_string(dsn) as writer, \
            PostgresSaver.from_conn_string(dsn) as off_writer, \
            psycopg.connect(dsn, autocommit=True) as raw:
        wconn, fconn = writer.conn, off_writer.conn
        assert isinstance(wconn, psycopg.Connection) and isinstance(fconn, psycopg.Connection)

        def rounds_for(depth: int) -> int:
            return scale.deep_rounds if depth >= 2000 else scale.rounds

        # -- headline threads, written by real graphs on our saver
        heads = []
        for key, wl, turns, freq in (
            ("a", "coding_a", scale.headline_a_turns, scale.headline_a_freq),
            ("b", "messages", scale.headline_b_turns, scale.headline_b_freq),
        ):
            tid = f"head-{key}"
            t0 = time.perf_counter()
            run_turns(build_graph(wl, writer, snapshot_frequency=freq), wl, tid, turns)
            latest = writer.get_tuple(_cfg(tid, None))
            assert latest is not None
            cid = latest.config["configurable"]["checkpoint_id"]
            heads.append((key, wl, turns, freq, tid, cid))
            log(f"  headline thread {key}: {wl} {turns} turns, snapshot_frequency={freq} "
                f"({time.perf_counter() - t0:.1f}s to write)")
        res["headline"] = {}
        for key, wl, turns, freq, tid, cid in heads:
            m = measure_history(net, tid, cid, ["messages", "files"], scale.rounds)
            m.update(workload=wl, turns=turns, snapshot_frequency=freq,
                     checkpoints=len(list(writer.list(_cfg(tid, None)))))
            res["headline"][key] = m
            _log_ratio(log, f"headline {key}", m)

        # -- depth sweep: one 2-channel chain, targets at several depths
        t0 = time.perf_counter()
        with wconn.transaction():
            deep = write_chain(writer, "deep2", max(scale.depths) + 1, CHANNELS[:2])
        log(f"  deep2 chain: {max(scale.depths) + 1} checkpoints "
            f"({time.perf_counter() - t0:.1f}s to write)")
        res["depth"] = []
        for d in scale.depths:
            m = measure_history(net, "deep2", deep.ids[d], CHANNELS[:2], rounds_for(d))
            m["depth"] = d
            res["depth"].append(m)
            _log_ratio(log, f"depth {d}", m)

        # -- channel sweep: one 4-channel chain, 1..4 channels requested
        with wconn.transaction():
            ch4 = write_chain(writer, "ch4", scale.channel_depth + 1, CHANNELS)
        res["channels"] = []
        for k in range(1, 5):
            m = measure_history(
                net, "ch4", ch4.ids[-1], CHANNELS[:k], rounds_for(scale.channel_depth)
            )
            m["depth"] = scale.channel_depth
            m["n_channels"] = k
            res["channels"].append(m)
            _log_ratio(log, f"{k} channel(s) at depth {scale.channel_depth}", m)

        # -- the same 2-channel chain written by the official saver (our fallback path)
        with fconn.transaction():
            offd = write_chain(off_writer, "deep2-official", scale.channel_depth + 1, CHANNELS[:2])
        m = measure_history(net, "deep2-official", offd.ids[-1], CHANNELS[:2],
                            rounds_for(scale.channel_depth))
        m["depth"] = scale.channel_depth
        res["official_written"] = m
        _log_ratio(log, f"official-written rows, depth {scale.channel_depth}", m)

        # -- forks: a main chain with short branches interleaved in time
        with wconn.transaction():
            main_ids: list[str] = []
            br: Branch | None = None
            branches: list[Branch] = []
            every = max(1, scale.fork_main // scale.forks)
            n_forks = 0
            for i in range(scale.fork_main):
                c = write_chain(writer, "forks", 1, CHANNELS[:2], start=br, seed=1)
                main_ids += c.ids
                branches += c.branches
                br = c.branches[-1]
                if (i + 1) % every == 0 and n_forks < scale.forks and i >= 5:
                    write_chain(writer, "forks", scale.fork_len, CHANNELS[:2],
                                start=branches[i - 5], seed=1000 + n_forks)
                    n_forks += 1
        m = measure_history(net, "forks", main_ids[-1], CHANNELS[:2], scale.rounds)
        m.update(depth=scale.fork_main - 1, forks=n_forks, fork_len=scale.fork_len)
        res["forks"] = m
        _log_ratio(log, f"{n_forks} forks", m)

        # -- many other threads in the database
        with wconn.transaction():
            write_chain(writer, "tpl", 20, CHANNELS[:2], seed=7)
        t0 = time.perf_counter()
        copy_threads(raw, "tpl", scale.other_threads, "other-")
        log(f"  {scale.other_threads} other threads copied ({time.perf_counter() - t0:.1f}s)")
        res["many_threads"] = {"other_threads": scale.other_threads}
        d = min(1000, max(scale.depths))
        m = measure_history(net, "deep2", deep.ids[d], CHANNELS[:2], scale.rounds)
        m["depth"] = d
        res["many_threads"]["deep2"] = m
        _log_ratio(log, f"depth {d} among {scale.other_threads} threads", m)
        key, wl, turns, freq, tid, cid = heads[0]
        m = measure_history(net, tid, cid, ["messages", "files"], scale.rounds)
        res["many_threads"]["headline_a"] = m
        _log_ratio(log, f"headline a among {scale.other_threads} threads", m)
    return res


def _log_ratio(log: Callable[[str], None], what: str, m: dict[str, Any]) -> None:
    parts = []
    for label, r in m["rtt"].items():
        parts.append(
            f"{label}ms: ours {r['ours']['median_ms']:.2f} / official "
            f"{r['official']['median_ms']:.2f} ms (x{r['ratio_official_ours']['median']:.2f})"
        )
    c = m["counts"]
    log(f"  {what}: " + "; ".join(parts)
        + f"; statements {c['ours']['statements']} vs {c['official']['statements']}"
        + ("" if m["results_equal"] else "  !! RESULTS DIFFER"))
