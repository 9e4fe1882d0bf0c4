"""The routing saver's pure parts: LSNs and tokens, and what the guard row decides."""

from __future__ import annotations

import pytest

from langgraph_delta_postgres.replicas._rules import (
    Need,
    Unsafe,
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
