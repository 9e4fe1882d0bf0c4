"""The recipe of docs/observability.md: OpenTelemetry's psycopg instrumentation traces the
saver's statements, for a graph run on our saver, over every way the saver makes or gets
its connections (from_conn_string with one connection or a pool, sync and async, and a
connection the application made and instrumented itself)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from langgraph_delta_postgres import AsyncDeltaPostgresSaver, DeltaPostgresSaver
from tests.integration.test_cache import _cfg, _graph, _run_turns

otel_sdk = pytest.importorskip("opentelemetry.sdk.trace")
psycopg_otel = pytest.importorskip("opentelemetry.instrumentation.psycopg")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

PsycopgInstrumentor = psycopg_otel.PsycopgInstrumentor


@pytest.fixture
def exporter() -> Iterator[tuple[Any, InMemorySpanExporter]]:
    exp = InMemorySpanExporter()
    provider = otel_sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exp))
    yield provider, exp
    provider.shutdown()


def _statements(exp: InMemorySpanExporter) -> list[str]:
    out = []
    for span in exp.get_finished_spans():
        attrs = span.attributes or {}
        text = attrs.get("db.statement") or attrs.get("db.query.text")
        if text is not None:
            out.append(str(text))
    return out


def _check(exp: InMemorySpanExporter) -> None:
    spans = exp.get_finished_spans()
    assert spans, "no span: the saver's connections were not instrumented"
    statements = _statements(exp)  # (a pool's connection check adds spans of its own)
    # the history walk (get_tuple of the latest checkpoint, and history calls), put and
    # put_writes: the statements of sql/*.sql, as sent (no parameter values by default)
    assert any(s.lstrip().startswith("WITH RECURSIVE") for s in statements), statements[:3]
    assert any("INSERT INTO" in s and "checkpoints" in s for s in statements)
    assert all(
        (span.attributes or {}).get("db.system", (span.attributes or {}).get("db.system.name"))
        == "postgresql"
        for span in spans
    )


@pytest.mark.parametrize("pool_size", [None, 2], ids=["conn", "pool"])
def test_instrument_traces_from_conn_string(
    dsn: str, exporter: tuple[Any, InMemorySpanExporter], pool_size: int | None
) -> None:
    provider, exp = exporter
    PsycopgInstrumentor().instrument(tracer_provider=provider)
    try:
        with DeltaPostgresSaver.from_conn_string(dsn, pool_size=pool_size) as saver:
            _run_turns(_graph(saver), f"otel-{pool_size}", 2)
    finally:
        PsycopgInstrumentor().uninstrument()
    _check(exp)


async def test_instrument_traces_the_async_saver(
    dsn: str, exporter: tuple[Any, InMemorySpanExporter]
) -> None:
    provider, exp = exporter
    PsycopgInstrumentor().instrument(tracer_provider=provider)
    try:
        async with AsyncDeltaPostgresSaver.from_conn_string(dsn) as saver:
            graph = _graph(saver)
            for i in range(2):
                await graph.ainvoke({"messages": [f"turn {i}"]}, _cfg("otel-async"))
    finally:
        PsycopgInstrumentor().uninstrument()
    _check(exp)


def test_instrument_connection_traces_a_connection_made_elsewhere(
    dsn: str, exporter: tuple[Any, InMemorySpanExporter]
) -> None:
    provider, exp = exporter
    with psycopg.connect(dsn, autocommit=True) as conn:
        PsycopgInstrumentor.instrument_connection(conn, tracer_provider=provider)
        saver = DeltaPostgresSaver(conn)
        _run_turns(_graph(saver), "otel-own", 2)
    _check(exp)
