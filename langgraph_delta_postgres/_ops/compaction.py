"""Compaction: ``prune(graph=...)`` stores each DeltaChannel's full value at the oldest
checkpoint the prune leaves visible, so that nothing older is needed and the prune
deletes it (``sql/retention.sql``: ``compact_chain``, ``compact_store``; the prune
statement's ``settled`` channels).

Only the graph can fold a DeltaChannel's writes into its value (its reducer), so this is
what a graph is passed for. What is stored is what a put of a snapshot step stores (a
``_DeltaSnapshot`` blob at the version the checkpoint names, and the inline marker), so
the official saver reads it too. The checkpoint reads what it read before: the value
stored is the one its history gave; its metadata (counters included), parent and
writes are unchanged.

A channel is compacted only when that is exact:

* it has a version at that checkpoint and is not stored there; no other checkpoint
  left visible shares that version with writes to the channel in between (the blob is
  shared by every checkpoint naming the version: each must read the same value; data
  written by LangGraph 1.2 never has such writes, a fork snapshots them);
* a channel without a version there is settled when its history there is empty
  (nothing older reaches it);
* the namespace's graph is known (the root namespace: ``graph``; a subgraph's: found by
  ``graph.get_subgraphs``) and the channel is a ``DeltaChannel`` in it.

Everything else keeps the keep-set of the prune without a graph (checkpoints kept as
seeds only)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from langgraph.channels.delta import DeltaChannel

from .._compat import _DeltaSnapshot
from .base import Op, Stmt
from .history import _op_delta_history

if TYPE_CHECKING:
    from .context import SaverCore

#: LangGraph's namespace separators (langgraph._internal._constants NS_SEP, NS_END)
_NS_SEP, _NS_END = "|", ":"


def check_graph(graph: Any) -> None:
    """``graph`` is a compiled graph (what ``StateGraph.compile`` returns), or None."""
    if graph is None:
        return
    if not isinstance(getattr(graph, "channels", None), Mapping) or not callable(
        getattr(graph, "get_subgraphs", None)
    ):
        raise TypeError(
            "graph must be a compiled graph (StateGraph(...).compile(), whose DeltaChannel "
            f"reducers prune compacts with), not {type(graph).__name__}"
        )


class DeltaSpecs:
    """The DeltaChannels of the graph that writes each namespace, found once per prune
    call (a namespace names task ids: the subgraph is looked up by its path without
    them, as LangGraph's own ``recast_checkpoint_ns`` does)."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self._by_path: dict[str, dict[str, DeltaChannel[Any]] | None] = {}

    def of(self, ns: str) -> dict[str, DeltaChannel[Any]] | None:
        """Those of namespace ``ns`` (None: no graph of it found)."""
        path = _NS_SEP.join(  # "" for the root namespace
            part.split(_NS_END)[0] for part in ns.split(_NS_SEP) if part and not part.isdigit()
        )
        if path not in self._by_path:
            self._by_path[path] = self._find(path)
        return self._by_path[path]

    def _find(self, path: str) -> dict[str, DeltaChannel[Any]] | None:
        found: Any = self.graph
        if path:
            found = next(
                (g for _, g in self.graph.get_subgraphs(namespace=path, recurse=True)), None
            )
        channels = getattr(found, "channels", None)
        if not isinstance(channels, Mapping):
            return None
        return {k: v for k, v in channels.items() if isinstance(v, DeltaChannel)}


def _shares_version_with_writes(rows: list[dict[str, Any]], channel: str) -> bool:
    """Whether a checkpoint of the visible chain has writes to ``channel`` and a child
    naming the same version: then two checkpoints name one blob and read two values."""
    for child, parent in zip(rows, rows[1:], strict=False):
        cv, pv = child["versions"] or {}, parent["versions"] or {}
        if channel in parent["written"] and cv.get(channel) == pv.get(channel):
            return True
    return False


def op_compact_ns(
    ctx: SaverCore, thread_id: str, ns: str, keep_last: int, specs: dict[str, DeltaChannel[Any]],
    dry_run: bool,
) -> Op[tuple[str, list[str]] | None]:
    """Compact one namespace (in the prune's transaction, its thread locked): the
    checkpoint it compacted and the channels the prune statement may take as settled
    there (None: nothing compacted)."""
    if not specs:
        return None
    rows = yield Stmt(
        ctx.queries["retention.compact_chain"],
        {"thread_id": thread_id, "checkpoint_ns": ns, "keep_last": keep_last,
         "channels": sorted(specs)},
    )
    if len(rows) < keep_last or rows[-1]["seed_only"]:
        return None  # nothing older to delete, or that checkpoint reads as deleted already
    oldest = rows[-1]
    versions = oldest["versions"] or {}
    to_store = [
        ch for ch in sorted(specs)
        if ch in versions and ch not in oldest["stored"]
        and not _shares_version_with_writes(rows, ch)
    ]
    unversioned = [ch for ch in sorted(specs) if ch not in versions]
    asked = to_store + unversioned
    if not asked:
        return None
    config = {"configurable": {
        "thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": oldest["checkpoint_id"],
    }}
    history = yield from _op_delta_history(ctx, config, asked)  # type: ignore[arg-type]
    settled = [ch for ch in unversioned if not history[ch]["writes"] and "seed" not in history[ch]]
    if to_store and not dry_run:
        dumped = []
        for ch in to_store:
            spec = specs[ch]
            # no seed: the empty value, as from_checkpoint(MISSING) makes it (MISSING is
            # private to langgraph; langgraph 1.2.0 reads None as a plain value None)
            seed = history[ch]["seed"] if "seed" in history[ch] else spec.typ()
            channel = spec.from_checkpoint(seed)
            channel.replay_writes(history[ch]["writes"])
            dumped.append(ctx.serde.dumps_typed(_DeltaSnapshot(channel.get())))
        yield Stmt(
            ctx.queries["retention.compact_store"],
            {
                "thread_id": thread_id, "checkpoint_ns": ns,
                "checkpoint_id": oldest["checkpoint_id"],
                "channels": to_store,
                "versions": [str(versions[ch]) for ch in to_store],
                "types": [t for t, _ in dumped],
                "blobs": [b for _, b in dumped],
            },
            fetch=False,
        )
    return oldest["checkpoint_id"], to_store + settled
