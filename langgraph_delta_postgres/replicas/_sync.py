"""The sync routing saver (:class:`RoutingSaver`); the rules are in :mod:`._rules`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_id,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg.rows import tuple_row
from psycopg_pool import ConnectionPool

from .._connect import DEFAULT_CACHE_BYTES, DEFAULT_PREPARE_THRESHOLD
from .._ops.retention import PruneStats
from ..saver import DeltaPostgresSaver
from ._rules import (
    _LAST_TUPLE,
    _NEED,
    _TOKEN,
    DEFAULT_REPLICA_TIMEOUT,
    DEFAULT_RETRY_AFTER,
    Need,
    R,
    ReplicaSaver,
    Unsafe,
    _ids,
    _replica_pool_kwargs,
    _RoutingCore,
    lsn_to_int,
    make_token,
    parse_token,
)


class RoutingSaver(_RoutingCore):
    """A checkpointer that writes to a primary and reads from its streaming replicas
    when that gives the primary's answer (see the module docstring and
    docs/replicas.md).

    Args:
        primary: the saver on the primary.
        replicas: one ``ConnectionPool`` (or DSN) per hot standby of the primary.
        retry_after: seconds a replica that could not be reached is left alone.
        replica_timeout: seconds a read waits for a replica connection (a DSN's pool).
        cache_bytes: history cache budget of each replica's saver.
    """

    primary: DeltaPostgresSaver
    replicas: list[ReplicaSaver]

    def __init__(
        self,
        primary: DeltaPostgresSaver,
        replicas: Sequence[ConnectionPool[Any] | str],
        *,
        retry_after: float = DEFAULT_RETRY_AFTER,
        replica_timeout: float = DEFAULT_REPLICA_TIMEOUT,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        pool_size: int = 4,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
    ) -> None:
        if not isinstance(primary, DeltaPostgresSaver):
            raise TypeError(f"primary must be a DeltaPostgresSaver, not {type(primary).__name__}")
        if isinstance(replicas, str):
            raise TypeError("replicas must be a list of DSNs or pools, not a str")
        super().__init__(serde=primary.serde)
        self.primary = primary
        self._own_pools: list[ConnectionPool[Any]] = []
        savers: list[ReplicaSaver] = []
        for r in replicas:
            if isinstance(r, str):
                pool: ConnectionPool[Any] = ConnectionPool(
                    r, min_size=1, max_size=pool_size, timeout=replica_timeout,
                    kwargs=_replica_pool_kwargs(r, prepare_threshold, replica_timeout),
                    check=ConnectionPool.check_connection, open=True,
                )
                self._own_pools.append(pool)
            elif isinstance(r, ConnectionPool):
                pool = r
            else:
                raise TypeError(
                    f"a replica must be a DSN or a ConnectionPool, not {type(r).__name__}"
                )
            savers.append(ReplicaSaver(pool, serde=primary.serde, schema=primary.schema,
                                       cache_bytes=cache_bytes))
        self.replicas = savers
        self._init_routing(retry_after)

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        replicas: Sequence[str],
        pool_size: int | None = None,
        serde: SerializerProtocol | None = None,
        schema: str | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
        retry_after: float = DEFAULT_RETRY_AFTER,
        replica_timeout: float = DEFAULT_REPLICA_TIMEOUT,
    ) -> Iterator[RoutingSaver]:
        """A routing saver on ``conn_string`` (the primary) and ``replicas`` (DSNs of its
        hot standbys); every connection and pool is closed on exit."""
        with DeltaPostgresSaver.from_conn_string(
            conn_string, pool_size=pool_size, serde=serde, schema=schema,
            cache_bytes=cache_bytes, prepare_threshold=prepare_threshold,
        ) as primary:
            saver = cls(primary, list(replicas), retry_after=retry_after,
                        replica_timeout=replica_timeout, cache_bytes=cache_bytes,
                        pool_size=pool_size or 4, prepare_threshold=prepare_threshold)
            try:
                yield saver
            finally:
                saver.close()

    def close(self) -> None:
        """Close the pools this saver opened for replica DSNs."""
        for p in self._own_pools:
            p.close()

    def with_allowlist(self, extra_allowlist: Any) -> RoutingSaver:
        clone = super().with_allowlist(extra_allowlist)
        if clone is self:
            return self
        assert isinstance(clone, RoutingSaver)
        clone.primary = cast(DeltaPostgresSaver, self.primary.with_allowlist(extra_allowlist))
        clone.replicas = [cast(ReplicaSaver, r.with_allowlist(extra_allowlist))
                          for r in self.replicas]
        return clone

    # ------------------------------------------------------------------ floors, tokens

    def _fetch_lsn(self) -> int:
        self._counts["lsn_fetches"] += 1
        with self.primary._connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(self.queries["replicas.primary_lsn"])
            row = cur.fetchone()
        assert row is not None
        return lsn_to_int(row[0])

    def _resolve(self, thread_id: str) -> None:
        seq = self._pending(thread_id)
        if seq is not None:
            self._resolved(seq, self._fetch_lsn())

    def token(self) -> str:
        """A read token: the primary's WAL position now, at or past every write that has
        committed on it (this saver's and every other process's). A reader that passes
        it (:meth:`read_after`, or ``configurable["lgdp_read_after"]``) sees them all.
        It also fixes the floors of this saver's writes so far (see docs/replicas.md)."""
        with self._lock:
            seq = self._seq
        lsn = self._fetch_lsn()
        self._resolved(seq, lsn)
        return make_token(lsn)

    @contextlib.contextmanager
    def read_after(self, token: str | None) -> Iterator[None]:
        """Reads in this block (this thread or task) see at least what ``token`` covers."""
        lsn = parse_token(token) if token is not None else None
        cur = _TOKEN.get()
        reset = _TOKEN.set(lsn if cur is None or lsn is None else max(cur, lsn))
        try:
            yield
        finally:
            _TOKEN.reset(reset)

    # ------------------------------------------------------------------ routing

    def _route(self, need: Need | str, call: Callable[[Any], R],
               after: Callable[[Any, R], None] | None = None) -> tuple[R, int]:
        """``call(saver)`` on a replica that meets ``need``, else on the primary;
        ``after(replica, result)`` may raise Unsafe to reject a replica's answer."""
        if isinstance(need, Need):
            for i in self._order():
                replica = self.replicas[i]
                reset = _NEED.set(need)
                try:
                    got = call(replica)
                    if after is not None:
                        _NEED.set(None)
                        after(replica, got)
                except Exception as e:  # every doubt: the primary answers
                    self._failed(i, e)
                    continue
                finally:
                    _NEED.reset(reset)
                self._counts["replica"] += 1
                return got, i
            reason = "down" if not self._order() else "replica_miss"
        else:
            reason = need
        self._counts[f"primary_{reason}"] += 1
        return call(self.primary), -1

    def _thread_of(self, config: RunnableConfig | None) -> str | None:
        conf = (config or {}).get("configurable") or {}
        t = conf.get("thread_id")
        return None if t is None else str(t)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        if (t := self._thread_of(config)) is not None:
            self._resolve(t)
        need = self._need("tuple", config) if t is not None else "not_routable"
        got, i = self._route(need, lambda s: s.get_tuple(config))
        if got is not None and get_checkpoint_id(config) is None and t is not None:
            c = got.config["configurable"]
            _LAST_TUPLE.set((id(self), (t, c["checkpoint_ns"], c["checkpoint_id"]), i))
        return cast(CheckpointTuple | None, got)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        t = self._thread_of(config)
        last = _LAST_TUPLE.get()
        _LAST_TUPLE.set(None)
        if t is None:
            return self.primary.get_delta_channel_history(config=config, channels=channels)
        self._resolve(t)
        need = self._need("history", config)
        cid = get_checkpoint_id(config)
        key = (t, str((config.get("configurable") or {}).get("checkpoint_ns") or ""), cid)
        if last is not None and last[0] == id(self) and last[1] == key:
            # the saver that served get_tuple: its prefetch (same statement, one snapshot)
            if last[2] < 0:
                self._counts["primary_same_as_tuple"] += 1
                return self.primary.get_delta_channel_history(config=config, channels=channels)
            need = Need(None if isinstance(need, str) else need.floor, t, key[1], cid,
                        True, False)
            for_one = self.replicas[last[2]]
            reset = _NEED.set(need)
            try:
                got = for_one.get_delta_channel_history(config=config, channels=channels)
                self._counts["replica"] += 1
                return got
            except Exception as e:
                self._failed(last[2], e)
            finally:
                _NEED.reset(reset)
        return cast(Mapping[str, DeltaChannelHistory], self._route(
            need, lambda s: s.get_delta_channel_history(config=config, channels=channels)
        )[0])

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        if (t := self._thread_of(config)) is not None:
            self._resolve(t)
        got = self._list_need(config, filter, before)
        call = lambda s: list(s.list(config, filter=filter, before=before, limit=limit))  # noqa: E731
        if isinstance(got, str):
            yield from self._route(got, call)[0]
            return
        need, must_seal = got

        def check(replica: ReplicaSaver, page: list[CheckpointTuple]) -> None:
            if not must_seal or not page:
                return
            assert t is not None
            with replica._connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
                cur.execute(self.queries["replicas.sealed_ids"], self._sealed_params(t, page))
                if len(cur.fetchall()) != len(page):
                    raise Unsafe("unsealed_page")

        yield from self._route(need, call, check)[0]

    # ------------------------------------------------------------------ primary only

    def setup(self) -> None:
        self.primary.setup()

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        try:
            return self.primary.put(config, checkpoint, metadata, new_versions)
        finally:
            self._wrote([str(config["configurable"]["thread_id"])])

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        try:
            self.primary.put_writes(config, writes, task_id, task_path)
        finally:
            self._wrote([str(config["configurable"]["thread_id"])])

    def delete_thread(self, thread_id: str) -> None:
        try:
            self.primary.delete_thread(thread_id)
        finally:
            self._wrote([str(thread_id)])

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        try:
            self.primary.delete_for_runs(run_ids)
        finally:
            self._wrote(None)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        try:
            self.primary.copy_thread(source_thread_id, target_thread_id)
        finally:
            self._wrote([str(target_thread_id)])

    def prune(  # type: ignore[override]  # returns what it deleted instead of None
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        keep_last: int | None = None,
        before: datetime | None = None,
        dry_run: bool = False,
    ) -> PruneStats:
        try:
            return self.primary.prune(thread_ids, strategy=strategy, keep_last=keep_last,
                                      before=before, dry_run=dry_run)
        finally:
            if not dry_run:
                self._wrote(_ids(thread_ids))

    def get_delta_channel_keepset(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> set[str]:
        return self.primary.get_delta_channel_keepset(config=config, channels=channels)


