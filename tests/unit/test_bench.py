"""The benchmark command: its quick path end to end on a small scale, and the proxy."""

from __future__ import annotations

import argparse
import json
import re
import socket
import threading
import time
from pathlib import Path
from typing import Any

import langgraph.checkpoint.postgres  # noqa: F401  the test extra installs the bench deps:
import matplotlib  # noqa: F401  a missing one is an error, never a skip
import pytest

from langgraph_delta_postgres._local.install import install_hint
from langgraph_delta_postgres.bench import main as bench
from langgraph_delta_postgres.bench.proxy import LatencyProxy
from tests.plugins.postgres import PgServer


def _args(**kw: object) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    ns = p.parse_args([])
    for k, v in kw.items():
        setattr(ns, k, v)
    return ns


def _only(pg_server: PgServer, tmp_path: Path, section: str, report: bool = False) -> Any:
    """``bench --only SECTION --json F`` at the tiny scale (``--out DIR`` too when
    ``report``): it exits 0 and its JSON names the command; that JSON."""
    out_json = tmp_path / f"{section}.json"
    out = {"out": str(tmp_path / "report")} if report else {}
    args = _args(dsn=pg_server.admin_dsn, scale="tiny", only=section, json=str(out_json), **out)
    assert bench.run(args) == 0
    res = json.loads(out_json.read_text())
    tail = f" --out {tmp_path / 'report'}" if report else ""
    assert res["command"].endswith(f"--only {section} --json {out_json}{tail}")
    return res


def test_quick_path_json_and_report(pg_server: PgServer, tmp_path: Path) -> None:
    out_json = tmp_path / "bench.json"
    args = _args(dsn=pg_server.admin_dsn, quick=True, scale="tiny",
                 json=str(out_json), out=str(tmp_path / "report"))
    assert bench.run(args) == 0
    res = json.loads(out_json.read_text())
    assert {
        "command", "machine", "select1_rtt", "workloads", "micro", "headline", "retention"
    } <= set(res)
    assert res["machine"]["postgres"]["server_version"]
    # both savers on the same workloads
    for wl in res["workloads"].values():
        keys = set(wl["savers"])
        assert any(k.startswith("ours@") for k in keys)
        assert any(k.startswith("official@") for k in keys)
        for point in wl["points"]:
            assert point["states_equal"]
            for k in keys:
                assert point["savers"][k]["invoke"]["n"] > 0
                assert k in point["resume"]["0"]
            assert point["savers"]["ours_full"]["storage_bytes"] > 0
    # history micro-benchmarks: both savers, every RTT, same answers
    micro = res["micro"]
    cases = [*micro["headline"].values(), *micro["depth"], *micro["channels"],
             micro["forks"], micro["official_written"]]
    for m in cases:
        assert m["results_equal"]
        assert m["counts"]["ours"]["statements"] == 1
        assert m["counts"]["official"]["statements"] >= 2
        for rtt in ("0", "2"):
            r = m["rtt"][rtt]
            assert r["ours"]["n"] > 0 and r["official"]["n"] > 0
            assert r["ratio_official_ours"]["median"] > 0
    for key in ("history_a", "history_b"):
        assert res["headline"][key]["official_over_ours@0ms"] > 0
    # loads: both threads, the three savers, equal states, the hand-out comparison
    loads = res["loads"]
    assert len(loads["threads"]) == 2
    for e in loads["threads"].values():
        assert e["states_equal"]
        for what in ("resume_loop", "resume_loop_graph", "history_page"):
            assert set(e[what]["stats"]) == {"ours", "ours_warm", "ours_nocache", "official",
                                             "official_new"}
            assert e[what]["official_over_ours"]["median"] > 0
            # the new savers, ours and the official one, each opened a connection per call
            opened = e[what]["open_ms"]
            assert set(opened) == {"ours", "official_new"}
            assert all(o["n"] >= e[what]["stats"]["ours"]["n"] for o in opened.values())
    # every section says how its savers were opened: by their from_conn_string
    assert "from_conn_string" in loads["opened"]["ours"]
    assert loads["pairs"]["ours"] == "official_new"
    for part in (*res["workloads"].values(), res["micro"], res["retention"], res["listput"]):
        assert all("from_conn_string" in v for v in part["opened"].values()), part["opened"]
    assert loads["handout"]["values"] > 0
    md = (tmp_path / "report" / "benchmarks.md").read_text()
    assert "Loads: resume loop and history page" in md
    assert res["command"] in md
    # the per-section detail of the same run: its own page under design/, its command at
    # the top, the summary linking it and its plots found from there
    detail = (tmp_path / "report" / "design" / "benchmarks-detail.md").read_text()
    assert "## History call (micro-benchmarks)" in detail
    assert "## History call" not in md
    assert res["command"] in detail.split("\n## ", 1)[0]
    assert "](design/benchmarks-detail.md)" in md
    for rel in re.findall(r"!\[[^]]*\]\(([^)]+)\)", detail):
        assert (tmp_path / "report" / "design" / rel).is_file(), rel
    assert list((tmp_path / "report" / "img").glob("*.png"))
    # the run's scratch databases are gone (named: other sessions may bench at once)
    ours = [res["database"]["scratch"], res["loads"]["scratch"]]
    assert all(w.startswith("database lgdp_bench_") for w in ours), ours
    with pg_server.admin() as conn:
        left = conn.execute(
            "SELECT datname FROM pg_database WHERE datname = ANY(%s)",
            ([w.split(" ", 1)[1] for w in ours],),
        ).fetchall()
    assert left == []


def test_only_retention(pg_server: PgServer, tmp_path: Path) -> None:
    res = _only(pg_server, tmp_path, "retention")
    ret = res["retention"]
    assert set(ret["storage"]) == {
        f"{k}/{v}" for k in ("default", "k5")
        for v in ("keep_latest", "keep_last_10", "compacted_keep_last_10")
    }
    for key, m in ret["storage"].items():
        assert m["state_unchanged"]  # every checkpoint left listed reads as before
        listed = 10 if "keep_last_10" in key else 1
        assert m["after"]["visible"] == listed
        if key.endswith("compacted_keep_last_10"):  # nothing but the listed ones stays,
            assert m["after"]["rows"]["checkpoints"] == listed  # and the official saver
            assert m["official_listed_reading_as_before"] == m["after"]["official_listed"]
            assert m["after"]["official_listed"] == listed  # lists and reads them as ours
        # 16 turns: the files field (one update a turn) has snapshots at k=5, none yet
        # at the default 100
        elif key.startswith("k5"):
            assert m["after"]["rows"]["checkpoints"] < m["before"]["rows"]["checkpoints"]
        else:
            assert m["freed"]["checkpoints"] == 0
        assert m["freed"]["checkpoints"] == (
            m["before"]["rows"]["checkpoints"] - m["after"]["rows"]["checkpoints"]
        )
        assert m["freed"]["hidden"] == m["after"]["rows"]["checkpoints"] - listed
        assert m["official_keep_latest"] == "NotImplementedError"  # it refuses delta threads
    assert ret["delta_bytes"]["after"] < ret["delta_bytes"]["before"]
    assert ret["compacted_threads_per_s"] > 0 and ret["compacted_freed"]["hidden"] == 0
    assert ret["compacted_bytes"]["after"] <= ret["delta_bytes"]["after"]
    assert ret["delta_threads_per_s"] > 0
    assert ret["full_official_over_ours_median"] > 0
    assert ret["full_ratio_chunks"] == 4


def test_only_writes(pg_server: PgServer, tmp_path: Path) -> None:
    res = _only(pg_server, tmp_path, "writes")
    w = res["writes"]
    assert (w["tasks"], w["nodes"], w["runs"]) == (16, 8, 4)
    for part in ("fan_out_sync", "fan_out_async"):
        assert w[part]["pairs"] == 4 and w[part]["ratio"] > 0
        assert all(v > 0 for v in w[part]["turn_ms_p50"].values())
    for part in ("concurrent_sync", "concurrent_async"):
        assert w[part]["rounds"] == 1 and all(v > 0 for v in w[part]["runs_per_s"].values())
    assert w["trigger_cost"]["pairs"] == 2 and w["trigger_cost"]["ratio"] > 0
    # the savers as users open them: ours by from_conn_string (pool_size= for the pools)
    for part in ("fan_out_sync", "fan_out_async"):
        assert w[part]["opened"]["ours"].endswith("from_conn_string (one connection)")
    for part in ("concurrent_sync", "concurrent_async"):
        assert w[part]["opened"]["ours"].endswith(f"from_conn_string(pool_size={w['runs']})")


def test_only_load(pg_server: PgServer, tmp_path: Path) -> None:
    res = _only(pg_server, tmp_path, "load", report=True)
    ld = res["load"]
    # both savers ended every session on the same state
    assert ld["states_equal"] is True
    assert ld["max_connections"] > 0
    assert ld["stagger"] == [0, 2] and ld["session_warm_turns"] == 1
    assert set(ld["levels"]) == {"asyncio", "threads"}
    for mode, levels in ld["levels"].items():
        assert set(levels) == {"1", "4"}
        for n, e in levels.items():
            assert len(e["runs"]) == ld["reps"]
            for pair in e["runs"]:
                assert sorted(pair["order"]) == ["official", "ours"]
                for who in ("ours", "official"):
                    r = pair[who]
                    assert r["turns"] == int(n) * ld["turns_per_session"][n]
                    assert r["turns_per_s"] > 0 and r["turn_ms"]["n"] == r["turns"]
                    assert r["pool_size"] == int(n)
                    # ours' pools are from_conn_string(pool_size=...), in each process
                    if who == "ours":
                        opened = r["opened"] if isinstance(r["opened"], list) else [r["opened"]]
                        assert all("from_conn_string(pool_size=" in o for o in opened)
                    # the sessions ran in min(N, client_procs) client processes
                    assert r["client_procs"] == min(int(n), ld["client_procs"]) == min(int(n), 2)
                    if ld["measures"]["db_time"]:
                        assert r["statements"]["calls"] > 0 and r["exec_ms_per_turn"] > 0
                    if ld["measures"]["backend_cpu"]:
                        assert r["backend_cpu_ms_per_turn"] is not None
            s = e["summary"]
            assert s["pairs"] == ld["reps"] and s["throughput_ours_over_official"] > 0
        for who in ("ours", "official"):
            b = ld["bytes"][mode][who]
            assert b["sent_bytes_per_turn"] > 0 and b["round_trips_per_turn"] > 0
    md = (tmp_path / "report" / "benchmarks-load.md").read_text()
    assert "## Load: how many agents one Postgres serves" in md
    assert res["command"] in md
    assert (tmp_path / "report" / "img" / "load.png").is_file()
    # its scratch databases are gone (by name: other bench tests may be running theirs)
    names = [w.removeprefix("database ") for w in ld["scratch"].values()]
    assert len(names) == 2 and all(n.startswith("lgdp_bench_") for n in names), names
    with pg_server.admin() as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_database WHERE datname = ANY(%s)", (names,)
        ).fetchone()
    assert left is not None and left[0] == 0


def test_missing_dependencies_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench, "_missing_deps", lambda: ["matplotlib"])
    assert bench.run(_args()) == 2
    err = capsys.readouterr().err
    assert install_hint("bench") in err
    assert "Traceback" not in err


def _echo_server() -> tuple[socket.socket, threading.Thread]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return srv, t


@pytest.mark.parametrize("rtt_ms", [0.0, 2.0, 10.0])
def test_proxy_adds_the_configured_delay(rtt_ms: float) -> None:
    srv, t = _echo_server()
    try:
        with LatencyProxy(srv.getsockname(), rtt_ms) as proxy:
            with socket.create_connection(("127.0.0.1", proxy.port)) as c:
                c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                times = []
                for i in range(15):
                    msg = f"ping {i}".encode()
                    t0 = time.perf_counter()
                    c.sendall(msg)
                    got = b""
                    while len(got) < len(msg):
                        got += c.recv(4096)
                    times.append((time.perf_counter() - t0) * 1000)
                    assert got == msg
            counts = proxy.counts()
    finally:
        srv.close()
    # a lower bound only: the proxy may never answer sooner than its delay, but a loaded
    # machine may answer any amount later (no upper bound on wall time)
    assert min(times) >= rtt_ms * 0.95
    assert counts.round_trips == 15
    assert counts.up_bytes == counts.down_bytes > 0


def test_each_timed_call_starts_after_a_full_collection() -> None:
    """Interleaved collects before every timed call, so no call pays a full collection
    made due by the garbage of the calls before it; the collection is not timed."""
    import gc

    from langgraph_delta_postgres.bench.timing import Interleaved

    events: list[str] = []

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            events.append("collect")

    def make(name: str):  # type: ignore[no-untyped-def]
        return (lambda: events.append(f"prepare {name}"), lambda _: events.append(name))

    frozen_during: list[int] = []

    def b() -> None:
        frozen_during.append(gc.get_freeze_count())
        events.append("b")

    gc.callbacks.append(on_gc)
    try:
        Interleaved().run(
{"a": make("a"), "b": b}, 2, warmup=0)
    finally:
        gc.callbacks.remove(on_gc)
    # what the process held before the run is out of the collector's reach during it,
    # and given back after
    assert frozen_during and all(n > 0 for n in frozen_during)
    assert gc.get_freeze_count() == 0
    calls = [e for e in events if e in ("a", "b")]
    assert calls == ["a", "b", "b", "a"]  # two callables alternate round by round
    for i, e in enumerate(events):
        if e in ("a", "b"):
            assert events[i - 1] == "collect", events


def test_interleaved_orders_and_reported_samples() -> None:
    """Two callables alternate (A B, B A): neither is always first in its round; three
    rotate, every other round reversed. With ``reported``, a call's return value (seconds
    it measured elsewhere, e.g. in a worker process) is its sample, and ratios are taken
    round by round on those."""
    from langgraph_delta_postgres.bench.timing import Interleaved

    seen: list[str] = []
    Interleaved().run({k: (lambda k=k: seen.append(k)) for k in "ab"}, 4, warmup=0)
    assert seen == ["a", "b", "b", "a", "a", "b", "b", "a"]
    seen.clear()
    Interleaved().run({k: (lambda k=k: seen.append(k)) for k in "abc"}, 4, warmup=0)
    assert seen == [*"abc", *"acb", *"cab", *"cba"]

    iv = Interleaved()
    told = {"a": iter([0.010, 0.020, 0.030]), "b": iter([0.020, 0.060, 0.030])}
    iv.run({k: (lambda k=k: next(told[k])) for k in "ab"}, 3, warmup=0, reported=True)
    assert iv.samples == {"a": [0.010, 0.020, 0.030], "b": [0.020, 0.060, 0.030]}
    assert iv.stats("a")["median_ms"] == pytest.approx(20.0)
    assert iv.ratio("b", "a") == pytest.approx({"median": 2.0, "min": 1.0, "max": 3.0, "n": 3})


def test_only_agent(pg_server: PgServer, tmp_path: Path) -> None:
    """The agent section at the tiny scale (6 turns): a deepagents session with the
    scripted model on the three savers, its subagent and summarization ran, the states
    and whole histories equal; no timing asserted. deepagents is in the test extra: like
    the bench deps above, a missing one is an error, never a skip (imported here, not at
    the top, so the other tests of this file do not pay for importing langchain)."""
    import deepagents  # noqa: F401
    res = _only(pg_server, tmp_path, "agent", report=True)
    a = res["agent"]
    assert a["turns"] == 6
    # deepagents' state: DeltaChannel on messages and files
    assert a["channels"]["messages"] == "DeltaChannel"
    assert a["channels"]["files"] == "DeltaChannel"
    assert a["states_equal"] and a["histories_equal"]
    calls = a["model_calls"]
    assert calls["ours"] == calls["official"] == calls["inmemory"]
    assert calls["ours"]["subagent"] > 0 and calls["ours"]["summary"] > 0
    assert a["state"]["summarized"] and a["state"]["files"] > 0
    assert len(set(a["state"]["checkpoints"].values())) == 1
    assert a["history_entries"] == a["state"]["checkpoints"]["ours"]
    for k in ("ours", "official", "inmemory", "floor"):
        assert a["turn_latency"]["stats"][k]["n"] == 6
    assert a["turn_latency"]["ours_over_floor"]["n"] == 6
    for what in ("get_state", "history_page", "history_all"):
        assert set(a[what]["stats"]) == {"ours_warm", "ours", "ours_nocache", "official",
                                         "official_new", "inmemory"}
        assert all(s["n"] > 0 for s in a[what]["stats"].values())
        assert a[what]["official_over"]["ours_warm"]["n"] > 0
        # a new saver is compared with a new one, each on a connection opened for the call
        assert a[what]["official_over"]["ours"]["n"] > 0
        assert set(a[what]["open_ms"]) == {"ours", "official_new"}
    assert a["pairs"]["ours"] == "official_new" and a["pairs"]["ours_warm"] == "official"
    # the floor is a reference (InMemorySaver plus a round trip per write), not a saver
    assert all("from_conn_string" in v for k, v in a["opened"].items() if k != "floor")
    assert "SELECT 1" in a["opened"]["floor"]
    report = (tmp_path / "report" / "agent.md").read_text()
    assert res["command"] in report and "A real agent" in report and "ours/floor" in report


def test_load_p99_is_the_nearest_rank() -> None:
    """The load section's p99 is the nearest-rank percentile: of 100 turns the second
    slowest (one outlier does not decide it), of 40 or fewer the slowest; and the full
    scale runs at least 100 turns per run, so that its p99 is not one turn."""
    from langgraph_delta_postgres.bench.load.scale import SCALES
    from langgraph_delta_postgres.bench.load.sessions import _pcts

    hundred = [i / 1000 for i in range(1, 101)]
    assert _pcts(hundred)["p99"] == pytest.approx(99.0)
    assert _pcts(hundred[:40])["p99"] == pytest.approx(40.0)
    assert _pcts([0.005])["p99"] == pytest.approx(5.0)
    full = SCALES["full"]
    assert all(n * full.turns[n] >= 100 for n in full.sessions)
