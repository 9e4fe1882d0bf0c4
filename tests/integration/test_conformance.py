"""The PyPI ``langgraph-checkpoint-conformance`` suite against AsyncDeltaPostgresSaver.

Every capability must be detected (the saver overrides the async method) and pass with
zero failures, on a single connection and on a pool.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.conformance.report import CapabilityReport, ProgressCallbacks

from langgraph_delta_postgres import AsyncDeltaPostgresSaver

CAPABILITIES = sorted(c.value for c in ALL_CAPABILITIES)


def _check_report(report: CapabilityReport) -> None:
    problems: list[str] = []
    for cap in CAPABILITIES:
        res = report.results.get(cap)
        if res is None:
            problems.append(f"{cap}: no result")
        elif not res.detected:
            problems.append(f"{cap}: not detected")
        elif res.passed is not True or res.tests_failed:
            problems.append(f"{cap}: {res.tests_failed} failed: {res.failures}")
        elif res.tests_passed == 0:
            problems.append(f"{cap}: ran no tests")
    assert not problems, "conformance failures:\n" + "\n".join(problems)
    assert report.conformance_level() == "FULL"


@pytest.mark.parametrize("pool_size", [None, 4], ids=["conn", "pool"])
async def test_conformance_suite(dsn: str, pool_size: int | None) -> None:
    errors: list[str] = []

    def on_result(cap: str, name: str, passed: bool, err: str | None) -> None:
        if not passed:
            errors.append(f"{cap}.{name}: {err}")

    @checkpointer_test(name=f"AsyncDeltaPostgresSaver-{pool_size}")
    async def factory() -> AsyncIterator[AsyncDeltaPostgresSaver]:
        async with AsyncDeltaPostgresSaver.from_conn_string(dsn, pool_size=pool_size) as saver:
            await saver.setup()  # already migrated: must be a no-op
            yield saver

    report = await validate(factory, progress=ProgressCallbacks(on_test_result=on_result))
    assert not errors, "failing conformance tests:\n" + "\n".join(errors)
    _check_report(report)
    total = sum(r.tests_passed for r in report.results.values())
    assert total >= 40, f"suspiciously few conformance tests ran: {total}"
