"""The routing of each call, written once for the sync and async routing savers: an
operation is a generator that yields steps (:class:`Call`: a method of the primary's or
a replica's saver; :class:`Query`: a statement of ``sql/replicas.sql`` on one of their
connections) and receives each step's answer, or has what the step raised thrown in;
:meth:`.RoutingSaver._drive` and :meth:`.AsyncRoutingSaver._drive` run the steps (the
pattern of :func:`.saver.drive` and :func:`.aio.adrive`). The rules a step follows are
in :mod:`._rules` (docs/replicas.md).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from contextvars import Token
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ClassVar, Generic, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, DeltaChannelHistory, get_checkpoint_id

from ._rules import _LAST_TUPLE, _NEED, Need, R, Unsafe, _RoutingCore, lsn_to_int, make_token

#: The saver index of a step on the primary (a replica's is its place in ``replicas``).
PRIMARY = -1


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
    """Run the statement ``key`` on a connection of saver ``saver``; its rows (tuples)
    are the answer. No guard runs before it."""

    saver: int
    key: str
    params: Mapping[str, Any] | None = None
    need: ClassVar[None] = None


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
    if isinstance(need, Need):
        for i in core._order():
            try:
                got = yield Call(i, method, args, kwargs, need)
                if sealed_of is not None and got:
                    params = core._sealed_params(sealed_of, got)
                    if len((yield Query(i, "replicas.sealed_ids", params))) != len(got):
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
    """The primary's WAL position now."""
    core._counts["lsn_fetches"] += 1
    rows = yield Query(PRIMARY, "replicas.primary_lsn")
    assert rows
    return lsn_to_int(rows[0][0])


def resolve(core: _RoutingCore, thread_id: str) -> Route[None]:
    """Fix the floors of this saver's writes if a floor of a read of the thread is
    pending (see :meth:`._RoutingCore._pending`)."""
    seq = core._pending(thread_id)
    if seq is not None:
        core._resolved(seq, (yield from fetch_lsn(core)))


def op_token(core: _RoutingCore) -> Route[str]:
    """See :meth:`.RoutingSaver.token`."""
    with core._lock:
        seq = core._seq
    lsn = yield from fetch_lsn(core)
    core._resolved(seq, lsn)
    return make_token(lsn)


def _thread_of(config: RunnableConfig | None) -> str | None:
    conf = (config or {}).get("configurable") or {}
    t = conf.get("thread_id")
    return None if t is None else str(t)


def op_get_tuple(core: _RoutingCore, config: RunnableConfig) -> Route[CheckpointTuple | None]:
    if (t := _thread_of(config)) is not None:
        yield from resolve(core, t)
    need = core._need("tuple", config) if t is not None else "not_routable"
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
    yield from resolve(core, t)
    need = core._need("history", config)
    cid = get_checkpoint_id(config)
    key = (t, str((config.get("configurable") or {}).get("checkpoint_ns") or ""), cid)
    if last is not None and last[0] == id(core) and last[1] == key:
        # the saver that served get_tuple: its prefetch (same statement, one snapshot)
        if last[2] < 0:
            core._counts["primary_same_as_tuple"] += 1
            return cast(Mapping[str, DeltaChannelHistory],
                        (yield Call(PRIMARY, method, (), kwargs)))
        one = Need(None if isinstance(need, str) else need.floor, t, key[1], cid, True, False)
        try:
            got = yield Call(last[2], method, (), kwargs, one)
            core._counts["replica"] += 1
            return cast(Mapping[str, DeltaChannelHistory], got)
        except Exception as e:
            core._failed(last[2], e)
    got, _ = yield from route(core, need, method, (), kwargs)
    return cast(Mapping[str, DeltaChannelHistory], got)


def op_list(
    core: _RoutingCore, config: RunnableConfig | None, filter: dict[str, Any] | None,
    before: RunnableConfig | None, limit: int | None,
) -> Route[list[CheckpointTuple]]:
    """The whole page (a list); a replica's only when the page is final there."""
    if (t := _thread_of(config)) is not None:
        yield from resolve(core, t)
    got = core._list_need(config, filter, before)
    kwargs = {"filter": filter, "before": before, "limit": limit}
    if isinstance(got, str):
        page, _ = yield from route(core, got, "list", (config,), kwargs)
    else:
        need, must_seal = got
        page, _ = yield from route(core, need, "list", (config,), kwargs,
                                   sealed_of=t if must_seal else None)
    return cast(list[CheckpointTuple], page)


# ---------------------------------------------------------------------- primary only


def op_write(core: _RoutingCore, method: str, *args: Any, **kwargs: Any) -> Route[Any]:
    """``method`` on the primary; then, whether it succeeded or not, the threads it may
    have written get a floor (:meth:`._RoutingCore._wrote`; none after a dry run)."""
    try:
        return (yield Call(PRIMARY, method, args, kwargs))
    finally:
        if not kwargs.get("dry_run"):
            core._wrote(_written(method, args))


def _written(method: str, args: tuple[Any, ...]) -> list[str] | None:
    """The threads a write of ``method`` with ``args`` is to (None: it can't name them)."""
    if method in ("put", "put_writes"):
        return [str(args[0]["configurable"]["thread_id"])]
    if method == "delete_thread":
        return [str(args[0])]
    if method == "copy_thread":
        return [str(args[1])]
    if method == "prune":
        return _ids(args[0])
    assert method == "delete_for_runs", method
    return None


def _ids(thread_ids: Sequence[str]) -> list[str]:
    return [str(t) for t in thread_ids] if not isinstance(thread_ids, str) else [thread_ids]
