"""How ``from_conn_string`` connects, and the savers' default options."""

from __future__ import annotations

import contextlib
import contextvars
import os
import time
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from ._checks import check_saver_options

#: Startup options of the connections ``from_conn_string`` opens. Every statement of this
#: package is primary-key lookups behind optimization fences, so one generic plan serves
#: all parameter values:
#: * plan_cache_mode=force_generic_plan: with the default, Postgres re-planned the history
#:   statement, put and get_tuple on every call for threads whose id is rare in the
#:   statistics (measured: 0 generic / 34 custom plans over 40 invokes; ~0.3-1 ms a call);
#: * enable_seqscan=off: a plan is cached when the connection first runs the statement,
#:   often while the tables are still tiny, where a sequential scan looks cheapest; cached,
#:   it would scan a whole table per step once the tables grow;
#: * jit=off: a generic plan of the recursive history statement is costed high enough to
#:   be JIT-compiled, which took 124 ms on a 3 ms statement (Postgres 15 with llvmjit).
GENERIC_PLANS = "-c plan_cache_mode=force_generic_plan -c enable_seqscan=off -c jit=off"
#: from_conn_string's default prepare_threshold (psycopg's own default).
DEFAULT_PREPARE_THRESHOLD = 5
#: Default budget of the decoded-value cache of get_delta_channel_history, per saver
#: object (see _cache/policy.py and docs/cache.md for how it was chosen).
DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
#: from_conn_string's connect_timeout (seconds) when neither the DSN nor PGCONNECT_TIMEOUT
#: sets one: without it a server that accepts TCP and never answers hangs it forever.
DEFAULT_CONNECT_TIMEOUT = 10


def connect_kwargs(conn_string: str, prepare_threshold: int | None) -> dict[str, Any]:
    """psycopg connect() arguments of ``from_conn_string``: autocommit, the prepare
    threshold, a connect timeout unless the DSN or ``PGCONNECT_TIMEOUT`` has one, and, when
    statements are prepared, generic plans (added to any ``options`` of the DSN; left out
    without prepared statements, e.g. behind PgBouncer, which rejects an ``options``
    startup parameter by default)."""
    params = conninfo_to_dict(conn_string)
    kwargs: dict[str, Any] = {"autocommit": True, "prepare_threshold": prepare_threshold}
    if "connect_timeout" not in params and not os.environ.get("PGCONNECT_TIMEOUT"):
        kwargs["connect_timeout"] = DEFAULT_CONNECT_TIMEOUT
    if prepare_threshold is not None:
        options = params.get("options")
        kwargs["options"] = f"{options} {GENERIC_PLANS}" if options else GENERIC_PLANS
    return kwargs


def from_conn_string_kwargs(
    conn_string: str, *, pipeline: bool, pool_size: int | None,
    prepare_threshold: int | None, cache_bytes: int,
) -> dict[str, Any]:
    """``from_conn_string``'s arguments checked, before anything connects (the sync and
    async savers' alike), and its :func:`connect_kwargs`."""
    check_saver_options(
        cache_bytes=cache_bytes, pipeline=pipeline, pool_size=pool_size,
        prepare_threshold=prepare_threshold,
    )
    if not isinstance(conn_string, str):
        raise TypeError(f"conn_string must be a str, not {type(conn_string).__name__}")
    kwargs = connect_kwargs(conn_string, prepare_threshold)
    if pool_size is not None and pipeline:
        raise ValueError("pipeline mode needs a single connection: drop pool_size")
    return kwargs


#: A pooled connection idle longer than this (seconds) is checked before it is lent
#: (see :func:`check_if_idle`).
IDLE_CHECK_S = 5.0


def mark_returned(conn: Any) -> None:
    """When the connection went back to the pool: the drivers' checkout calls it as it
    ends (``_driver_async._connection``)."""
    conn._lgdp_idle_since = time.monotonic()


def _idle_long(conn: Any) -> bool:
    since = getattr(conn, "_lgdp_idle_since", None)
    return since is not None and time.monotonic() - since > IDLE_CHECK_S


#: Set while a call is run again after its connection broke (:func:`retrying`): every
#: connection the pool lends then is checked, so the second try gets a live one.
_CHECK_EVERY: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "lgdp_check_every", default=False
)


def check_if_idle(conn: Any) -> None:
    """A pool's ``check`` callback that costs a healthy, recently used connection no round
    trip: only a connection idle longer than ``IDLE_CHECK_S`` runs psycopg_pool's empty
    statement first (a server restart or a dropped connection usually shows there). A
    connection broken more recently fails its statement, and the savers run it once more
    on a checked connection (:func:`retrying`); the routing saver's replica reads go to
    the primary instead. Measured: a pool that checked every connection on every
    checkout cost a warm ``get_state`` two more round trips (1.25x / 1.85x the time at 1 /
    2 ms of network delay, issue 37)."""
    if _CHECK_EVERY.get() or _idle_long(conn):
        ConnectionPool.check_connection(conn)


async def acheck_if_idle(conn: Any) -> None:
    """The async twin of :func:`check_if_idle`."""
    if _CHECK_EVERY.get() or _idle_long(conn):
        await AsyncConnectionPool.check_connection(conn)


#: Errors that end the connection: the server terminated it (a restart, pg_terminate_backend)
#: before psycopg may mark it broken
SHUT_DOWN = (psycopg.errors.AdminShutdown, psycopg.errors.CrashShutdown)


def may_retry(pooled: bool, atomic: bool, broken: bool, started: bool) -> bool:
    """Whether a call that failed runs once more on another connection: on a pool (a
    single connection has no other), and either before its first statement (the checkout,
    or a new connection's server check, failed: nothing ran) or with its connection
    broken (a server restart, a dropped connection: not an error of the statement)
    outside a transaction of several statements (``atomic``). Every statement run
    outside such a transaction is safe to repeat: reads, and writes keyed by their ids
    (a put is an upsert of the same row, put_writes insert-or-nothing / upsert of the
    same values), whether or not the first try committed. A pool that lent nothing in
    time (``PoolTimeout``) is not asked again."""
    return pooled and (not started or (broken and not atomic))


@contextlib.contextmanager
def retrying() -> Iterator[None]:
    """Around a call's second try: the pool checks every connection it lends."""
    token = _CHECK_EVERY.set(True)
    try:
        yield
    finally:
        _CHECK_EVERY.reset(token)


@contextlib.contextmanager
def explained_connect(prepare_threshold: int | None) -> Iterator[None]:
    """Around ``from_conn_string``'s first connect: a pooler's refusal of the ``options``
    startup parameter (PgBouncer's default) says where the parameter came from and what
    to do, instead of only naming it. ``prepare_threshold``: ``from_conn_string``'s, which
    decides whether the saver added its generic-plan settings (:func:`connect_kwargs`);
    without them, the parameter came from the connection string or ``PGOPTIONS``."""
    try:
        yield
    except psycopg.OperationalError as e:
        if "unsupported startup parameter: options" not in str(e):
            raise
        raise psycopg.OperationalError(f"{e}: {_options_refused(prepare_threshold)}") from e


def _options_refused(prepare_threshold: int | None) -> str:
    ignore = (
        "PgBouncer: add `options` to `ignore_startup_parameters` in pgbouncer.ini, e.g. "
        "`ignore_startup_parameters = extra_float_digits,options`"
    )
    if prepare_threshold is None:
        return (
            "the server in front (a pooler such as PgBouncer) refuses the `options` "
            "startup parameter, which the connection string (`options=`) or the PGOPTIONS "
            "environment variable sets (this saver sends none with prepare_threshold=None). "
            "Remove it there (set those settings with ALTER ROLE / ALTER DATABASE ... SET "
            f"instead), or have the pooler ignore it ({ignore}; the settings are then "
            "dropped). See docs/poolers.md."
        )
    return (
        "the server in front (a pooler such as PgBouncer) refuses the `options` startup "
        "parameter, which this saver sends when it prepares statements "
        f"(`{GENERIC_PLANS}`: generic plans). Behind a transaction-mode pooler pass "
        "prepare_threshold=None: no prepared statements, and no `options` sent. Or have "
        f"the pooler ignore it ({ignore}): the connections then plan with the server's "
        "defaults, and prepared statements need session mode or PgBouncer >= 1.21 with "
        "max_prepared_statements. See docs/poolers.md."
    )
