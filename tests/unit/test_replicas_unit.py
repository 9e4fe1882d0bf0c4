"""The routing saver's pure parts: LSNs and tokens, and what the guard row decides."""

from __future__ import annotations

from pathlib import Path

import pytest

from langgraph_delta_postgres._server import ServerIdentity
from langgraph_delta_postgres.replicas._guard import Need, ReplicaBounds, Unsafe
from langgraph_delta_postgres.replicas._tokens import (
    int_to_lsn,
    lsn_to_int,
    make_token,
    parse_token,
)


def test_lsn_round_trip_and_order() -> None:
    lsns = ["0/0", "0/16B3748", "0/FFFFFFFF", "1/0", "16/B374D848"]
    ints = [lsn_to_int(x) for x in lsns]
    assert ints == sorted(ints) and len(set(ints)) == len(ints)
    assert [int_to_lsn(i) for i in ints] == lsns
    assert parse_token(make_token(ints[-1])) == ints[-1]


@pytest.mark.parametrize("bad", ["", "0/0", "lgdp-lsn:", "lgdp-lsn:xyz", "lgdp-lsn:1/2/3"])
def test_bad_tokens_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_token(bad)


@pytest.mark.parametrize(
    ("need", "row", "reason"),
    [
        (Need(None, "t", "", "c", True, False), (False, None, True, True), "not_standby"),
        (Need(100, "t", "", None, False, False), (True, "0/63", False, False), "behind"),
        (Need(None, "t", "", "c", True, False), (True, "0/1", False, False), "absent"),
        (Need(None, "t", "", "c", True, True), (True, "0/1", True, False), "head"),
        (Need(100, "t", "", "c", True, True), (True, "0/64", True, True), None),
        (Need(None, "t", "", "c", True, False), (True, "0/1", True, False), None),
    ],
)
def test_guard_decisions(need: Need, row: tuple[object, ...], reason: str | None) -> None:
    if reason is None:
        need.check(row)
    else:
        with pytest.raises(Unsafe) as e:
            need.check(row)
        assert e.value.reason == reason


def test_guard_params_carry_the_floor_and_the_wait() -> None:
    p = Need(lsn_to_int("16/B374D848"), "t", "ns", "c", True, False, 10).params(0.05)
    assert p == {"thread_id": "t", "checkpoint_ns": "ns", "checkpoint_id": "c",
                 "floor": "16/B374D848", "max_wait_ms": 50}
    assert Need(None, "t", "", None, False, False).params(0)["floor"] is None


def test_replica_bounds_refuse_another_cluster_or_timeline() -> None:
    b = ReplicaBounds(2.0, 0.05)
    assert b.session == {"statement_timeout": "2000ms", "lock_timeout": "200ms"}
    b.verify(ServerIdentity("1", True, 1))  # no primary known yet: in recovery is enough
    with pytest.raises(Unsafe) as e:
        b.verify(ServerIdentity("1", False, 1))
    assert e.value.reason == "not_standby"
    b.expected = ServerIdentity("1", False, 2)
    b.verify(ServerIdentity("1", True, 2))
    for other, reason, says in (
        (ServerIdentity("9", True, 2), "mismatch", "system identifier"),
        (ServerIdentity("1", True, 3), "mismatch", "ahead"),  # follows another primary
        (ServerIdentity("1", True, 1), "timeline", "behind"),  # maybe a late report
    ):
        with pytest.raises(Unsafe) as e:
            b.verify(other)
        assert e.value.reason == reason and says in e.value.detail


def test_standby_takes_a_pg_basebackup_of_the_servers_major_else_the_oldest_newer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pg_basebackup backs up servers of its own and older major versions: the standby
    takes one of the server's major where there is one, else the oldest newer one, never
    an older one (it would refuse the server)."""
    from langgraph_delta_postgres._local import standby_plan as _standby_plan

    def fake(path: Path, said: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"#!/bin/sh\necho '{said}'\n")
        path.chmod(0o755)

    system = tmp_path / "system"
    for major in (13, 15, 18):
        fake(system / str(major) / "bin" / "pg_basebackup", f"pg_basebackup (PostgreSQL) {major}.2")
    server = tmp_path / "server"  # a server build without pg_basebackup (npm's)
    fake(server / "postgres", "postgres (PostgreSQL) 16.14")
    monkeypatch.setattr(_standby_plan, "_SYSTEM_PG", system)
    monkeypatch.setattr(_standby_plan, "_candidates", lambda: [])
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))

    assert _standby_plan._basebackup(16, server) == (system / "18" / "bin" / "pg_basebackup", 18)
    assert _standby_plan._basebackup(14, server) == (system / "15" / "bin" / "pg_basebackup", 15)
    assert _standby_plan._basebackup(15, server) == (system / "15" / "bin" / "pg_basebackup", 15)
    assert _standby_plan._basebackup(19, server) is None
    # the server's own directory first, when it has one of its major
    fake(server / "pg_basebackup", "pg_basebackup (PostgreSQL) 16.14")
    assert _standby_plan._basebackup(16, server) == (server / "pg_basebackup", 16)
