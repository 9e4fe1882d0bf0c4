"""The routing of each call, written once for the sync and async routing savers: an
operation is a generator that yields steps (:class:`Call`: a method of the primary's or
a replica's saver; :class:`Query`: a statement of ``sql/replicas.sql`` on one of their
connections, a :class:`.Stmt` as the savers' operations yield, run by the savers'
``execute_stmt``) and receives each step's answer, or has what the step raised thrown
in; :meth:`.RoutingSaver._drive` and :meth:`.AsyncRoutingSaver._drive` run the steps
(the pattern of :func:`.saver.drive` and :func:`.aio.adrive`). The rules a step follows
are in :mod:`._rules` (docs/replicas.md).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from contextvars import Token
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ClassVar, Generic, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, DeltaChannelHistory, get_checkpoint_id

from .._ops.base import Stmt
from ._rules import _LAST_TUPLE, _NEED, Need, R, Unsafe, _RoutingCore, lsn_to_int, make_token

#: The saver index of a step on the primary (a replica's is its place in ``replicas``).
PRIMARY = -1
#: History pages of up to this many checkpoints (without a filter) are checked by the
#: guard before they are read; longer ones, after (``replicas.sealed_ids``).
MAX_GUARDED_PAGE = 200


@dataclass(frozen=True, slots=True)
class Call:
    """Call ``method`` (the sync name: the async driver awaits ``a<method>``; ``list``
    answers the whole page, as a list) of saver ``saver`` with ``args`` and ``kwargs``;
    ``need``: what the replica must show first (its saver's connections run the guard)."""

    saver: int
    method: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    need: Need | None = None


@dataclass(frozen=True, slots=True)
class Query:
    """Run ``stmt`` on a connection of saver ``saver`` (``execute_stmt``, the savers'
    driver); its rows (tuples) are the answer. No guard runs before it."""

    saver: int
    stmt: Stmt
    need: ClassVar[None] = None


def query(
    core: _RoutingCore, saver: int, key: str | tuple[str, ...],
    params: Mapping[str, Any] | None = None,
) -> Query:
    """The :class:`Query` of the statement ``key`` (blocks of sql/, several joined into
    one statement) on saver ``saver``, its rows as tuples."""
    return Query(saver, Stmt(core._statement(key), params, by_position=True))


Step = Call | Query
Route = Generator[Step, Any, R]


class Run(Generic[R]):
    """A driver's bookkeeping of one operation. ``next()`` resumes the operation with
    the last step's ``answer``, or throws in what the step raised, and gives the next
    step; None once the operation has returned (``result``). ``with run.call(step):``
    around the step sets its need for the replica saver's connections, and catches
    whatever the step raises (an exception, a cancellation) to hand it to the operation,
    which decides: a failed replica is a miss, anything else goes on up."""

    def __init__(self, op: Route[R]) -> None:
        self._op = op
        self._reset: Token[Need | None] | None = None
        self.answer: Any = None
        self.error: BaseException | None = None

    def next(self) -> Step | None:
        answer, error = self.answer, self.error
        self.answer = self.error = None
        try:
            return self._op.throw(error) if error is not None else self._op.send(answer)
        except StopIteration as stop:
            self.result: R = stop.value
            return None

    def call(self, step: Step) -> Run[R]:
        self._reset = _NEED.set(step.need)
        return self

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        assert self._reset is not None
        _NEED.reset(self._reset)
        self.error = error
        return True


# ---------------------------------------------------------------------- the routing


def route(
    core: _RoutingCore, need: Need | str, method: str, args: tuple[Any, ...] = (),
    kwargs: Mapping[str, Any] | None = None, *, sealed_of: str | None = None,
) -> Route[tuple[Any, int]]:
    """(``method(*args, **kwargs)`` on a replica that meets ``need``, else on the
    primary; the saver that answered). ``sealed_of``: the answer is a history page of
    this thread, every checkpoint of which must have a child on the replica."""
    kwargs = kwargs or {}
    if isinstance(need, Need) and core._bounds.expected is None:
        yield from op_verify(core)  # an async saver whose open() was not called
    if isinstance(need, Need):
        core._primary_moved()
        for i in core._order():
            try:
                got = yield Call(i, method, args, kwargs, need)
                if need.gate and not got:  # the gate was closed, or the page is empty
                    raise Unsafe("unsealed_page")
                if sealed_of is not None and got:
                    params = core._sealed_params(sealed_of, got)
                    if len((yield query(core, i, "replicas.sealed_ids", params))) != len(got):
                        raise Unsafe("unsealed_page")
            except Exception as e:  # every doubt: the primary answers
                core._failed(i, e)
                continue
            core._counts["replica"] += 1
            return got, i
        reason = "down" if not core._order() else "replica_miss"
    else:
        reason = need
    core._counts[f"primary_{reason}"] += 1
    return (yield Call(PRIMARY, method, args, kwargs)), PRIMARY


def fetch_lsn(core: _RoutingCore) -> Route[int]:
    """The primary's WAL position now (its timeline is checked on the way)."""
    core._counts["lsn_fetches"] += 1
    rows = yield query(core, PRIMARY, "replicas.primary_lsn")
    assert rows
    core._primary_timeline(rows[0][1])
    return lsn_to_int(rows[0][0])


def fetch_head(core: _RoutingCore, thread_id: str, ns: str) -> Route[tuple[int, str | None]]:
    """(the primary's WAL position now, the namespace's newest checkpoint id): the floor
    of a read of the latest checkpoint, in one statement (``replicas.head``)."""
    core._counts["lsn_fetches"] += 1
    rows = yield query(core, PRIMARY, ("replicas.primary_lsn", "replicas.head"),
                       {"thread_id": thread_id, "checkpoint_ns": ns})
    assert rows
    lsn, timeline, head = rows[0]
    core._primary_timeline(timeline)
    return lsn_to_int(lsn), head


def latest_need(core: _RoutingCore, thread_id: str, ns: str,
                token: int | None) -> Route[Need | str]:
    """A read of the thread's latest checkpoint: a replica answers only once it has
    replayed past the primary's position when the read began (whoever wrote since), and
    has the namespace's head; a thread without a checkpoint there: the primary."""
    lsn, head = yield from fetch_head(core, thread_id, ns)
    if head is None:
        return "empty"
    # the floor covers the head's commit: no presence check (in the guard's snapshot,
    # taken before its wait, a head that arrives during the wait would read as absent)
    return Need(max(lsn, token or 0), thread_id, ns, head, False, False)


def op_verify(core: _RoutingCore) -> Route[None]:
    """At construction (async: ``open()``): the primary's server, then each replica's,
    checked against it (``ReplicaMismatchError``). A replica that can't be reached now
    is checked when it is first used."""
    rows = yield query(core, PRIMARY, "server.identity")
    core._primary_is(rows[0])
    for i in range(len(core.replicas)):
        try:
            yield query(core, i, "server.identity")
        except Unsafe as e:
            if e.reason == "timeline":  # maybe a late report: left alone, checked again
                core._failed(i, e)
                continue
            raise core._mismatch(i, e) from None
        except Exception as e:  # unreachable now: left alone, checked at first use
            core._failed(i, e)


def op_token(core: _RoutingCore) -> Route[str]:
    """See :meth:`.RoutingSaver.token`."""
    return make_token((yield from fetch_lsn(core)))


def _conf_of(config: Any) -> Mapping[str, Any]:
    """A config's ``configurable``; {} for what is not one (None, a str, a config whose
    ``configurable`` is not a dict): such a call is not routable and goes to the
    primary, whose own checks raise the caller's error (a ValueError naming it)."""
    conf = config.get("configurable") if isinstance(config, Mapping) else None
    return conf if isinstance(conf, Mapping) else {}


def _thread_of(config: RunnableConfig | None) -> str | None:
    t = _conf_of(config).get("thread_id")
    return None if t is None else str(t)


def _ns_of(config: RunnableConfig) -> str:
    return str(_conf_of(config).get("checkpoint_ns") or "")


def op_get_tuple(core: _RoutingCore, config: RunnableConfig) -> Route[CheckpointTuple | None]:
    t = _thread_of(config)
    need: Need | str
    if t is None:
        need = "not_routable"
    elif (cid := get_checkpoint_id(config)) is None:
        need = yield from latest_need(core, t, _ns_of(config), core._token(config))
    else:
        # by id: final on a replica that has it with a child (its pending writes too)
        need = Need(core._token(config), t, _ns_of(config), cid, True, True)
    got, i = yield from route(core, need, "get_tuple", (config,))
    if got is not None and get_checkpoint_id(config) is None and t is not None:
        c = got.config["configurable"]
        _LAST_TUPLE.set((id(core), (t, c["checkpoint_ns"], c["checkpoint_id"]), i))
    return cast(CheckpointTuple | None, got)


def op_history(
    core: _RoutingCore, config: RunnableConfig, channels: Sequence[str]
) -> Route[Mapping[str, DeltaChannelHistory]]:
    method, kwargs = "get_delta_channel_history", {"config": config, "channels": channels}
    t = _thread_of(config)
    last = _LAST_TUPLE.get()
    _LAST_TUPLE.set(None)
    if t is None:
        return cast(Mapping[str, DeltaChannelHistory],
                    (yield Call(PRIMARY, method, (), kwargs)))
    cid = get_checkpoint_id(config)
    ns = _ns_of(config)
    token = core._token(config)
    if last is not None and last[0] == id(core) and last[1] == (t, ns, cid):
        # the saver that served get_tuple: its prefetch (same statement, one snapshot)
        if last[2] < 0:
            core._counts["primary_same_as_tuple"] += 1
            return cast(Mapping[str, DeltaChannelHistory],
                        (yield Call(PRIMARY, method, (), kwargs)))
        try:
            got = yield Call(last[2], method, (), kwargs, Need(token, t, ns, cid, True, False))
            core._counts["replica"] += 1
            return cast(Mapping[str, DeltaChannelHistory], got)
        except Exception as e:
            core._failed(last[2], e)
    need: Need | str
    if cid is None:
        need = yield from latest_need(core, t, ns, token)
    else:
        # by id: its ancestors all have a child; its own writes are not part of it
        need = Need(token, t, ns, cid, True, False)
    got, _ = yield from route(core, need, method, (), kwargs)
    return cast(Mapping[str, DeltaChannelHistory], got)


def op_list(
    core: _RoutingCore, config: RunnableConfig | None, filter: dict[str, Any] | None,
    before: RunnableConfig | None, limit: int | None,
) -> Route[list[CheckpointTuple]]:
    """The whole page (a list); a replica's only when it is the primary's: a page of
    the latest checkpoints once the replica has replayed past the primary's position at
    the read's start; a page before a checkpoint when every checkpoint of it has a child
    there (final)."""
    kwargs = {"filter": filter, "before": before, "limit": limit}
    conf = _conf_of(config)
    t = _thread_of(config)
    need: Need | str
    sealed_of = None
    if config is None or t is None or get_checkpoint_id(config):
        need = "not_routable"
    elif before is not None and not (
        isinstance(before, Mapping) and isinstance(before.get("configurable"), Mapping)
    ):
        need = "not_routable"  # not a config: the primary says what is wrong with it
    elif before_id := _conf_of(before).get("checkpoint_id"):
        if conf.get("checkpoint_ns") is None:
            need = "not_routable"
        elif limit is not None and 0 < limit <= MAX_GUARDED_PAGE and not filter:
            # the page's own statement is gated (replicas.page_gate: one round trip); with
            # a floor (a token), the guard waits for it first
            need = Need(core._token(config), t, str(conf["checkpoint_ns"]), before_id,
                        True, False, limit, gate=True)
        else:  # a filter, or a long page: its checkpoints are checked after it
            need = Need(core._token(config), t, str(conf["checkpoint_ns"]), before_id,
                        True, False)
            sealed_of = t
    else:
        lsn = yield from fetch_lsn(core)
        token = core._token(config)
        need = Need(max(lsn, token or 0), t, str(conf.get("checkpoint_ns") or ""), None,
                    False, False)
    page, _ = yield from route(core, need, "list", (config,), kwargs, sealed_of=sealed_of)
    return cast(list[CheckpointTuple], page)


# ---------------------------------------------------------------------- primary only


def op_write(core: _RoutingCore, method: str, *args: Any, **kwargs: Any) -> Route[Any]:
    """``method`` on the primary. A put or put_writes keeps no floor: every later read
    of a latest checkpoint asks the primary for its position first (:func:`latest_need`),
    and reads by id need a checkpoint with a child. A delete, prune or copy (which remove
    or add whole checkpoints) raises the saver's maintenance floor to the primary's
    position after it, for every read: this saver never reads a checkpoint it deleted."""
    _LAST_TUPLE.set(None)
    try:
        return (yield Call(PRIMARY, method, args, kwargs))
    finally:
        if method not in ("put", "put_writes") and not kwargs.get("dry_run"):
            core._maintained((yield from fetch_lsn(core)))
