"""Savers over every connection kind, for behaviour tests.

``saver_factory`` (parametrized) yields a callable ``make(dsn)`` -> context manager of a
saver; ids are ``sync-conn``, ``sync-pool``, ``sync-pipeline``, ``async-conn``,
``async-pool``, ``async-pipeline``. ``is_async`` tells the test which API to use;
``conn_kw`` are extra ``psycopg`` connect arguments (``prepare_threshold=None`` behind
PgBouncer, tests/integration/test_pgbouncer.py).
The connections are deliberately NOT autocommit and use the default tuple row factory
for the ``conn`` kinds, to prove the savers don't rely on either.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from langgraph_delta_postgres import AsyncDeltaPostgresSaver, DeltaPostgresSaver

KINDS = ["sync-conn", "sync-pool", "sync-pipeline", "async-conn", "async-pool", "async-pipeline"]


@contextlib.contextmanager
def sync_saver(
    dsn: str, kind: str, *, conn_kw: Mapping[str, Any] | None = None, **kw: Any
) -> Iterator[DeltaPostgresSaver]:
    ckw = dict(conn_kw or {})
    if kind == "conn":
        with psycopg.connect(dsn, autocommit=False, **ckw) as conn:
            yield DeltaPostgresSaver(conn, **kw)
    elif kind == "pool":
        with ConnectionPool(dsn, min_size=1, max_size=4, open=True, kwargs=ckw) as pool:
            yield DeltaPostgresSaver(pool, **kw)
    elif kind == "pipeline":
        with psycopg.connect(dsn, autocommit=True, **ckw) as conn, conn.pipeline() as pipe:
            yield DeltaPostgresSaver(conn, pipe, **kw)
    else:
        raise ValueError(kind)


@contextlib.asynccontextmanager
async def async_saver(
    dsn: str, kind: str, *, conn_kw: Mapping[str, Any] | None = None, **kw: Any
) -> AsyncIterator[AsyncDeltaPostgresSaver]:
    ckw = dict(conn_kw or {})
    if kind == "conn":
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=False, **ckw) as conn:
            yield AsyncDeltaPostgresSaver(conn, **kw)
    elif kind == "pool":
        async with AsyncConnectionPool(
            dsn, min_size=1, max_size=4, open=False, kwargs=ckw
        ) as pool:
            yield AsyncDeltaPostgresSaver(pool, **kw)
    elif kind == "pipeline":
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True, **ckw) as conn:
            async with conn.pipeline() as pipe:
                yield AsyncDeltaPostgresSaver(conn, pipe, **kw)
    else:
        raise ValueError(kind)


@dataclass
class SaverFactory:
    kind: str
    conn_kw: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_async(self) -> bool:
        return self.kind.startswith("async")

    @property
    def conn_kind(self) -> str:
        return self.kind.split("-", 1)[1]

    def sync(self, dsn: str, **kw: Any) -> contextlib.AbstractContextManager[DeltaPostgresSaver]:
        assert not self.is_async
        return sync_saver(dsn, self.conn_kind, conn_kw=self.conn_kw, **kw)

    def aio(
        self, dsn: str, **kw: Any
    ) -> contextlib.AbstractAsyncContextManager[AsyncDeltaPostgresSaver]:
        assert self.is_async
        return async_saver(dsn, self.conn_kind, conn_kw=self.conn_kw, **kw)


@pytest.fixture(params=KINDS)
def saver_factory(request: pytest.FixtureRequest) -> SaverFactory:
    return SaverFactory(request.param)


@pytest.fixture(params=[k for k in KINDS if k.startswith("sync")])
def sync_factory(request: pytest.FixtureRequest) -> SaverFactory:
    return SaverFactory(request.param)


@pytest.fixture(params=[k for k in KINDS if k.startswith("async")])
def async_factory(request: pytest.FixtureRequest) -> SaverFactory:
    return SaverFactory(request.param)

