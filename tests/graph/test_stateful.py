"""A stateful differential test: real graphs, every fault and maintenance call, every read.

A Hypothesis ``RuleBasedStateMachine`` interleaves, on a few threads of a real graph with
two ``DeltaChannel`` fields: invokes (some with a ``put`` that fails mid-run under
``durability="async"``, leaving orphan writes), forks (``update_state`` at an older
checkpoint), late ``put_writes`` to an ancestor made by a **second saver** on another
connection (its own cache), orphan writes at ids between two checkpoints, ``delete_thread``,
``prune`` (both strategies), ``copy_thread`` and ``delete_for_runs`` of a thread's last run.
The same operations feed ``InMemorySaver`` (the reference; what it has no call for is
done to its storage as the call's contract says).

After every step every thread is read, newest first, through: the saver that wrote
(cache on), the second saver (cache on), a saver with ``cache_bytes=0``, a new saver
(cold cache), and the official ``PostgresSaver`` on the same rows, and each history must
equal InMemorySaver's (after ``prune(keep_latest)``, which keeps only what the latest
state needs, the latest state only).

CI runs a few short examples; ``-m slow`` (or ``LGDP_STATEFUL_EXAMPLES``) runs it long.
"""

from __future__ import annotations

import copy
import os
import uuid
from collections import Counter
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg.rows import dict_row

from langgraph_delta_postgres import DeltaPostgresSaver
from tests.graph._util import canon
from tests.graph.test_orphan_writes import PutFault, graph_builder

BUILDER = graph_builder()  # a -> b -> c, two DeltaChannel fields (test_orphan_writes)


class FailingMixin:
    """put fails on the chosen call (counted per saver from the last arm())."""

    fail_at: int | None = None
    puts = 0

    def arm(self, fail_at: int | None) -> None:
        self.fail_at, self.puts = fail_at, 0

    def put(self, *a: Any, **kw: Any) -> Any:
        self.puts += 1
        if self.puts == self.fail_at:
            raise PutFault("injected: put lost")
        return super().put(*a, **kw)  # type: ignore[misc]


class FailingOurs(FailingMixin, DeltaPostgresSaver):
    pass


class FailingMem(FailingMixin, InMemorySaver):
    pass


def _cfg(thread: str, checkpoint_id: str | None = None, **extra: Any) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread, **extra}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def history(saver: BaseCheckpointSaver[Any], thread: str) -> list[Any]:
    graph = BUILDER.compile(checkpointer=saver)
    return [(canon(s.values), tuple(s.next)) for s in graph.get_state_history(_cfg(thread))]


def latest(saver: BaseCheckpointSaver[Any], thread: str) -> Any:
    s = BUILDER.compile(checkpointer=saver).get_state(_cfg(thread))
    return (canon(s.values), tuple(s.next))


def ids(saver: BaseCheckpointSaver[Any], thread: str) -> list[str]:
    return [t.config["configurable"]["checkpoint_id"] for t in saver.list(_cfg(thread))]


DSN: dict[str, str] = {}
THREADS = ("t0", "t1", "t2")
#: how many times each operation ran (and changed something), over all examples
DONE: Counter[str] = Counter()


class Machine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        dsn = DSN["dsn"]
        self.run = uuid.uuid4().hex[:8]  # every example uses threads of its own
        self.conns = [
            psycopg.connect(dsn, autocommit=True),
            psycopg.connect(dsn, autocommit=True),
            psycopg.connect(dsn, autocommit=True, row_factory=dict_row),
        ]
        self.ours = FailingOurs(self.conns[0])
        self.second = DeltaPostgresSaver(self.conns[1])  # another worker, its own cache
        self.nocache = DeltaPostgresSaver(self.conns[0], cache_bytes=0)
        self.official = PostgresSaver(self.conns[2])  # type: ignore[arg-type]
        self.mem = FailingMem()
        self.live: dict[str, bool] = {}  # thread -> pruned (only the latest state compared)
        self.last_run: dict[str, str] = {}  # thread -> its last op was this run's invoke
        self.ops = 0

    def t(self, name: str) -> str:
        return f"{self.run}-{name}"

    def teardown(self) -> None:
        for c in self.conns:
            c.close()

    # ------------------------------------------------------------------ operations

    def _both(self, fn: Any) -> None:
        """Run ``fn`` on ours then on the reference; both must fail alike."""
        outcomes: list[str | None] = []
        for saver in (self.ours, self.mem):
            try:
                fn(saver)
                outcomes.append(None)
            except PutFault:
                outcomes.append("fault")
        assert outcomes[0] == outcomes[1], outcomes
        self.ops += 1
        DONE["fault" if outcomes[0] else "invoke"] += 1

    @rule(name=st.sampled_from(THREADS), fail_at=st.sampled_from([None, None, 2, 3, 4]),
          with_run=st.booleans())
    def invoke(self, name: str, fail_at: int | None, with_run: bool) -> None:
        thread = self.t(name)
        run_id = str(uuid.uuid4()) if with_run else None
        extra = {"run_id": run_id} if run_id else {}

        def go(saver: Any) -> None:
            saver.arm(fail_at)
            try:
                BUILDER.compile(checkpointer=saver).invoke(
                    {"items": [f"in{self.ops}"], "log": [], "n": 0}, _cfg(thread, **extra),
                    durability="async" if fail_at else None,
                )
            finally:
                saver.arm(None)

        self._both(go)
        self.live.setdefault(thread, False)
        if run_id and not fail_at:
            self.last_run[thread] = run_id
        else:
            self.last_run.pop(thread, None)

    @precondition(lambda self: any(not p for p in self.live.values()))
    @rule(data=st.data())
    def fork(self, data: st.DataObject) -> None:
        thread = data.draw(st.sampled_from(sorted(t for t, p in self.live.items() if not p)))
        ours_ids, mem_ids = ids(self.ours, thread), ids(self.mem, thread)
        assert len(ours_ids) == len(mem_ids)
        if not ours_ids:
            return
        i = data.draw(st.integers(0, len(ours_ids) - 1))
        for saver, cid in ((self.ours, ours_ids[i]), (self.mem, mem_ids[i])):
            BUILDER.compile(checkpointer=saver).update_state(
                _cfg(thread, cid, checkpoint_ns=""), {"items": [f"fork{self.ops}"]}
            )
        self.ops += 1
        DONE["fork"] += 1
        self.last_run.pop(thread, None)

    @precondition(lambda self: any(not p for p in self.live.values()))
    @rule(data=st.data())
    def late_writes(self, data: st.DataObject) -> None:
        """The second saver adds writes to an ancestor (a checkpoint with children)."""
        thread = data.draw(st.sampled_from(sorted(t for t, p in self.live.items() if not p)))
        ours_ids, mem_ids = ids(self.ours, thread), ids(self.mem, thread)
        if len(ours_ids) < 2:
            return
        i = data.draw(st.integers(1, len(ours_ids) - 1))
        writes = [("items", [f"late{self.ops}"]), ("log", ["late"])]
        task = f"late-{self.ops}"
        self.second.put_writes(_cfg(thread, ours_ids[i], checkpoint_ns=""), writes, task, "~z")
        self.mem.put_writes(_cfg(thread, mem_ids[i], checkpoint_ns=""), writes, task, "~z")
        self.ops += 1
        DONE["late_writes"] += 1

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def orphan_writes(self, data: st.DataObject) -> None:
        """Writes at an id between two checkpoints that was never put."""
        thread = data.draw(st.sampled_from(sorted(self.live)))
        ours_ids = sorted(ids(self.ours, thread))
        if len(ours_ids) < 2:
            return
        i = data.draw(st.integers(0, len(ours_ids) - 2))
        orphan = ours_ids[i] + "0"
        assert ours_ids[i] < orphan < ours_ids[i + 1]
        self.ours.put_writes(
            _cfg(thread, orphan, checkpoint_ns=""), [("items", ["ORPHAN"])], "orphan", ""
        )
        self.ops += 1
        DONE["orphan_writes"] += 1

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data(), how=st.sampled_from(["delete_thread", "prune_delete"]))
    def delete(self, data: st.DataObject, how: str) -> None:
        thread = data.draw(st.sampled_from(sorted(self.live)))
        if how == "delete_thread":
            self.ours.delete_thread(thread)
        else:
            self.ours.prune([thread], strategy="delete")
        self.mem.delete_thread(thread)
        del self.live[thread]
        self.last_run.pop(thread, None)
        self.ops += 1
        DONE["delete"] += 1

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data(), keep_last=st.sampled_from([1, 1, 3]))
    def prune_keep_latest(self, data: st.DataObject, keep_last: int) -> None:
        thread = data.draw(st.sampled_from(sorted(self.live)))
        self.ours.prune([thread], strategy="keep_latest", keep_last=keep_last)
        self.live[thread] = True
        self.last_run.pop(thread, None)
        self.ops += 1
        DONE["prune_keep_latest"] += 1

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def copy(self, data: st.DataObject) -> None:
        src = data.draw(st.sampled_from(sorted(self.live)))
        dst = self.t(f"copy{self.ops}")
        self.ours.copy_thread(src, dst)
        mem = self.mem
        if src in mem.storage:
            mem.storage[dst] = copy.deepcopy(mem.storage[src])
        for key in [k for k in mem.writes if k[0] == src]:
            mem.writes[(dst, *key[1:])] = copy.deepcopy(mem.writes[key])
        for blob_key in [k for k in mem.blobs if k[0] == src]:
            mem.blobs[(dst, *blob_key[1:])] = copy.deepcopy(mem.blobs[blob_key])
        self.live[dst] = self.live[src]
        self.ops += 1
        DONE["copy"] += 1

    @precondition(lambda self: bool(self.last_run))
    @rule(data=st.data())
    def delete_last_run(self, data: st.DataObject) -> None:
        """delete_for_runs of a thread's last run (a rollback): nothing later needs its
        checkpoints, so all of them go; the reference drops them the same way."""
        thread = data.draw(st.sampled_from(sorted(self.last_run)))
        run_id = self.last_run.pop(thread)
        self.ours.delete_for_runs([run_id])
        for ns, cps in self.mem.storage.get(thread, {}).items():
            for cid in [c for c, v in cps.items() if self.mem.serde.loads_typed(v[1]).get(
                "run_id") == run_id]:
                del cps[cid]
                self.mem.writes.pop((thread, ns, cid), None)
        self.ops += 1
        DONE["delete_last_run"] += 1

    # ------------------------------------------------------------------ checks

    @invariant()
    def every_read_agrees(self) -> None:
        with DeltaPostgresSaver.from_conn_string(DSN["dsn"]) as cold:
            readers: dict[str, BaseCheckpointSaver[Any]] = {
                "ours": self.ours, "second": self.second, "nocache": self.nocache,
                "cold": cold, "official": self.official,
            }
            for thread, pruned in sorted(self.live.items()):
                if pruned:
                    want = latest(self.mem, thread)
                    for name, saver in readers.items():
                        assert latest(saver, thread) == want, (name, thread)
                    continue
                want_h = history(self.mem, thread)
                for name, saver in readers.items():
                    assert history(saver, thread) == want_h, (name, thread)


def _examples() -> int:
    return int(os.environ.get("LGDP_STATEFUL_EXAMPLES", "8"))


def _run(dsn: str, examples: int, steps: int) -> None:
    DSN["dsn"] = dsn
    DONE.clear()
    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        ),
    )
    # every kind of operation ran, and enough of them to mean something
    print("operations:", dict(DONE))
    kinds = ("invoke", "fault", "fork", "late_writes", "orphan_writes", "delete",
             "prune_keep_latest", "copy", "delete_last_run")
    assert all(DONE[k] > 0 for k in kinds), DONE
    assert sum(DONE.values()) >= examples * steps // 2, DONE


def test_stateful_differential(dsn: str) -> None:
    _run(dsn, _examples(), 16)


@pytest.mark.slow
def test_stateful_differential_long(dsn: str) -> None:
    _run(dsn, max(_examples(), 40), 30)
