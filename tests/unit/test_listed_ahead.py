"""``_Listed._read_ahead`` (the listing answering rows ahead of the one asked): a row it
reads ahead of time whose value fails to decode must not fail, or change, the answer of
a row whose own walk never reaches it; and a value that decodes but does not pickle is
kept as its blob (_cache/copies.py), so every row is answered, each with a decode of its
own. The listing is built from rows shaped as ``checkpoints.select_tuples`` gives them (a
pure structure: no statement runs here; the integration tests compare the listing with
the statement on real rows)."""

from __future__ import annotations

import types
from typing import Any

import pytest

from langgraph_delta_postgres._ops.listed import _Listed
from langgraph_delta_postgres._ops.values import RowValues

N = 14
BAD = 4  # the row whose write decodes to a value that does not pickle, or fails to decode


def rows() -> list[dict[str, Any]]:
    """Newest first: c13 -> c12 -> ... -> c0; one write of 'ch' per row; an inline seed
    of 'ch' every fourth row."""
    out = []
    for i in reversed(range(N)):
        out.append({
            "thread_id": "t", "checkpoint_ns": "", "checkpoint_id": f"c{i:02}",
            "parent_checkpoint_id": f"c{i - 1:02}" if i else None,
            "stored_channels": None,
            "checkpoint": {"channel_values": {"ch": f"seed{i}"} if i % 4 == 0 else {}},
            "blob_channels": [], "blob_types": [], "blob_values": [], "blob_tokens": [],
            "write_task_ids": [f"task{i}"], "write_channels": ["ch"],
            "write_types": ["t"], "write_blobs": [b"bad" if i == BAD else str(i).encode()],
        })
    return out


def unpicklable(typed: tuple[str, bytes]) -> Any:
    _, blob = typed
    if blob == b"bad":
        return (x for x in range(0))  # decodes, does not pickle
    return int(blob)


def corrupt(typed: tuple[str, bytes]) -> Any:
    _, blob = typed
    if blob == b"bad":
        raise ValueError("corrupt blob")
    return int(blob)


def listing(loads: Any) -> _Listed:
    return _Listed(object(), "t", rows(), 10_000, RowValues(loads))


def ask(listed: _Listed, cid: str, loads: Any) -> Any:
    """The answer in a comparable form (a generator as 'gen'), or the error's type."""
    try:
        got = listed.answer("", cid, ["ch"], loads)
    except ValueError as e:
        return type(e)
    if got is None:
        return None
    return {ch: {k: [(t, c, "gen" if isinstance(v, types.GeneratorType) else v)
                     for t, c, v in e["writes"]] if k == "writes" else x for k, x in e.items()}
            for ch, e in got.items()}


@pytest.mark.parametrize("loads", [corrupt, unpicklable], ids=lambda f: f.__name__)
def test_rows_answer_in_order_as_alone(loads: Any) -> None:
    keys = [r["checkpoint_id"] for r in rows()]
    alone = {cid: ask(listing(loads), cid, loads) for cid in keys}
    assert None not in alone.values()  # the listing answers every row here
    reaches = {cid for cid, got in alone.items() if got is ValueError}
    if loads is corrupt:  # the rows whose walk reaches the bad row fail, the others not
        assert reaches == {"c05", "c06", "c07", "c08"}
    else:
        assert not reaches
        assert ("task4", "ch", "gen") in alone["c05"]["ch"]["writes"]
    ahead = listing(loads)
    in_order = {cid: ask(ahead, cid, loads) for cid in keys}
    assert in_order == alone
    assert ahead._ahead_end > 0 and not ahead.broken  # it did read ahead


def test_a_value_that_does_not_pickle_is_decoded_for_each_answer() -> None:
    decoded: list[bytes] = []

    def loads(typed: tuple[str, bytes]) -> Any:
        decoded.append(typed[1])
        return unpicklable(typed)

    listed = listing(loads)
    gens = []
    for cid in ("c05", "c06", "c07"):
        got = listed.answer("", cid, ["ch"], loads)
        assert got is not None
        gens += [v for _, _, v in got["ch"]["writes"] if isinstance(v, types.GeneratorType)]
    assert len(gens) == 3 and len({id(g) for g in gens}) == 3
    assert decoded.count(b"bad") == 1 + 3  # decoded once when listed, then per answer
