"""``_Listed._read_ahead`` (the listing answering rows ahead of the one asked): a row it
reads ahead of time whose value does not pickle must not fail, or change, the answer of
a row whose own walk never reaches it. The listing is built from rows shaped as
``checkpoints.select_tuples`` gives them (a pure structure: no statement runs here; the
integration tests compare the listing with the statement on real rows)."""

from __future__ import annotations

from typing import Any

from langgraph_delta_postgres._ops.listed import _Listed
from langgraph_delta_postgres._ops.values import RowValues

N = 14
BAD = 4  # the row whose write decodes to a value that does not pickle


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


def loads(typed: tuple[str, bytes]) -> Any:
    _, blob = typed
    if blob == b"bad":
        return (x for x in ())  # decodes, does not pickle
    return int(blob)


def listing() -> _Listed:
    return _Listed(object(), "t", rows(), 10_000, RowValues(loads))


def test_rows_above_a_row_that_does_not_pickle_answer_in_order_as_alone() -> None:
    keys = [r["checkpoint_id"] for r in rows()]
    alone = {cid: listing().answer("", cid, ["ch"], loads) for cid in keys}
    # a row whose walk reaches the bad row gets None (the statement answers it), the
    # others an answer: both kinds are here
    reaches = {cid for cid, got in alone.items() if got is None}
    assert reaches and len(reaches) < N
    ahead = listing()
    in_order = {}
    for cid in keys:
        in_order[cid] = ahead.answer("", cid, ["ch"], loads)
    first_none = next(i for i, cid in enumerate(keys) if alone[cid] is None)
    for i, cid in enumerate(keys):
        if i < first_none:  # above the first row that reaches it: answered, as alone
            assert in_order[cid] is not None and in_order[cid] == alone[cid], cid
        else:  # from there on the listing may decline (the statement answers); when it
            # answers, it answers as alone
            assert in_order[cid] is None or in_order[cid] == alone[cid], cid
    assert ahead._ahead_end > 0  # it did read ahead
