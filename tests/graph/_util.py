"""Helpers shared by the graph-tier tests: canonical forms for comparing histories and
states across savers, the official saver on the same database, and a generated-history
model that can be replayed into any saver through ``put``/``put_writes``."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.types import Interrupt, Overwrite
from psycopg.rows import dict_row

from tests._config import cfg as cfg  # the suite's one cfg(), re-exported


def canon(v: Any) -> Any:
    """A structure that compares equal only for values of the same types
    (``True`` != ``1``, ``_DeltaSnapshot([x])`` != ``[x]``, ``Overwrite`` kept apart)."""
    if isinstance(v, _DeltaSnapshot):
        return ("_DeltaSnapshot", canon(v.value))
    if isinstance(v, Interrupt):  # its id derives from the checkpoint id: not compared
        return ("Interrupt", canon(v.value))
    if isinstance(v, Overwrite):
        return ("Overwrite", canon(v.value))
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, dict):
        return ("dict", tuple(sorted((str(k), canon(x)) for k, x in v.items())))
    if isinstance(v, list | tuple):
        return ("seq", tuple(canon(x) for x in v))
    if v is None or isinstance(v, int | float | str):
        return (type(v).__name__, v)
    # messages and other objects: their repr-free dict form where possible
    if hasattr(v, "model_dump"):
        return (type(v).__name__, canon(v.model_dump()))
    return (type(v).__name__, repr(v))


def canon_history(h: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for ch, entry in h.items():
        assert set(entry) <= {"writes", "seed"}, entry
        e: dict[str, Any] = {"writes": [(t, c, canon(v)) for t, c, v in entry["writes"]]}
        if "seed" in entry:
            e["seed"] = canon(entry["seed"])
        out[ch] = e
    return out


@contextlib.contextmanager
def official_saver(dsn: str) -> Iterator[PostgresSaver]:
    """The official saver on the same database (never ``setup()``: our migrations made
    the tables)."""
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        yield PostgresSaver(conn)


# --------------------------------------------------------------------------- generated

INLINE_SEEDS: list[Any] = [0, "", False, None, 7, "txt", True, 2.5]


@dataclass
class Step:
    """One checkpoint of a generated thread and the writes stored against it."""

    ns: str
    checkpoint_id: str
    parent_id: str | None
    channel_values: dict[str, Any]
    channel_versions: dict[str, str]
    new_versions: dict[str, str]
    metadata: dict[str, Any]
    # (task_id, task_path, [(channel, value), ...]) in put_writes call order
    writes: list[tuple[str, str, list[tuple[str, Any]]]] = field(default_factory=list)
    # (channel, version) pairs that get an explicit 'empty' blob row in Postgres
    empty_rows: list[tuple[str, str]] = field(default_factory=list)


TASK_PATHS = [
    "",
    "a",
    "B",
    "b",
    "ä",
    "~",
    "Z",
    "é",
    "~__pregel_pull, a",
    "~__pregel_push, 0",
    "日本",
    "A",
    "aa",
]


class ThreadGen:
    """Builds a random but *consistent* history: a channel's value in channel_values is
    the value stored at its current version, a channel written at a checkpoint gets a
    new version in each child, and ids are increasing uuid6."""

    def __init__(self, rng: random.Random, channels: Sequence[str], thread_id: str) -> None:
        self.rng = rng
        self.channels = list(channels)
        self.thread_id = thread_id
        self.steps: list[Step] = []
        self._counter = 0

    def _version(self, old: str | None) -> str:
        n = 0 if old is None else int(old.split(".")[0])
        self._counter += 1
        return f"{n + 1:032}.{self._counter:016}"

    def _value(self) -> Any:
        r = self.rng.random()
        if r < 0.35:
            return self.rng.randint(-5, 1000)
        if r < 0.55:
            return self.rng.choice(["x", "y", "ünï", "", "Z"])
        if r < 0.8:
            return [self.rng.randint(0, 9) for _ in range(self.rng.randint(0, 3))]
        if r < 0.92:
            return {"k": self.rng.randint(0, 9), "s": "v"}
        return Overwrite([self.rng.randint(0, 9)])

    def _seed_value(self, kind: str) -> Any:
        if kind == "snapshot":
            return _DeltaSnapshot([self.rng.randint(0, 99) for _ in range(2)])
        if kind == "plain":
            return self.rng.choice([[1, 2, 3], {"m": [1]}, ["a"], []])
        return self.rng.choice(INLINE_SEEDS)

    def step(
        self,
        parent: Step | None,
        ns: str = "",
        *,
        seed_p: float = 0.15,
        write_p: float = 0.7,
        allow_none: bool = True,
    ) -> Step:
        rng = self.rng
        versions = dict(parent.channel_versions) if parent else {}
        values: dict[str, Any] = {}
        if parent:
            # carry values stored at unchanged versions (the real runtime keeps plain
            # and inline values; a snapshot is left out, its blob stays behind the version)
            for ch, v in parent.channel_values.items():
                if not isinstance(v, _DeltaSnapshot):
                    values[ch] = v
        written = {c for _, _, ws in (parent.writes if parent else []) for c, _ in ws}
        new_versions: dict[str, str] = {}
        empty_rows: list[tuple[str, str]] = []
        for ch in self.channels:
            must_bump = ch in written
            r = rng.random()
            if r < seed_p:
                kind = rng.choice(["snapshot", "plain", "inline", "inline"])
                val = self._seed_value(kind)
                if val is None and not allow_none:
                    val = 0
                versions[ch] = new_versions[ch] = self._version(versions.get(ch))
                values[ch] = val
            elif must_bump or r < seed_p + 0.1:
                # a version bump with no stored value (DeltaChannel without snapshot)
                versions[ch] = new_versions[ch] = self._version(versions.get(ch))
                values.pop(ch, None)
                if rng.random() < 0.3:
                    empty_rows.append((ch, versions[ch]))
        st = Step(
            ns=ns,
            checkpoint_id=str(uuid6(clock_seq=len(self.steps))),
            parent_id=parent.checkpoint_id if parent else None,
            channel_values=values,
            channel_versions=versions,
            new_versions=new_versions,
            metadata={"source": "loop", "step": len(self.steps), "parents": {}},
            empty_rows=empty_rows,
        )
        if rng.random() < write_p:
            self._add_writes(st)
        self.steps.append(st)
        return st

    def _add_writes(self, st: Step) -> None:
        rng = self.rng
        n_tasks = rng.choice([1, 1, 2, 3, 5])
        paths = rng.sample(TASK_PATHS, k=n_tasks)
        if rng.random() < 0.3 and n_tasks > 1:
            paths[1] = paths[0]  # same path, different task ids: tie broken by task_id
        for i, path in enumerate(paths):
            task_id = str(uuid6(clock_seq=rng.getrandbits(14)))
            if rng.random() < 0.2:
                task_id = rng.choice(["T", "t", "ä-task", "0"]) + str(i)
            ws: list[tuple[str, Any]] = []
            for _ in range(rng.choice([1, 1, 2, 3])):
                ws.append((rng.choice(self.channels + ["other"]), self._value()))
            st.writes.append((task_id, path, ws))
        rng.shuffle(st.writes)  # call order must not matter


def _put_args(thread_id: str, st: Step) -> tuple[RunnableConfig, Checkpoint, Any, dict[str, Any]]:
    """The ``put`` arguments of one generated step (shared by the sync and async writers)."""
    cp = empty_checkpoint()
    cp["id"] = st.checkpoint_id
    cp["channel_values"] = dict(st.channel_values)
    cp["channel_versions"] = dict(st.channel_versions)
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": st.ns}
    if st.parent_id:
        conf["checkpoint_id"] = st.parent_id
    return {"configurable": conf}, cp, st.metadata, dict(st.new_versions)


def apply_steps(saver: BaseCheckpointSaver[Any], thread_id: str, steps: Sequence[Step]) -> None:
    for st in steps:
        saved = saver.put(*_put_args(thread_id, st))
        for task_id, path, ws in st.writes:
            saver.put_writes(saved, ws, task_id, path)


async def aapply_steps(
    saver: BaseCheckpointSaver[Any], thread_id: str, steps: Sequence[Step]
) -> None:
    for st in steps:
        saved = await saver.aput(*_put_args(thread_id, st))
        for task_id, path, ws in st.writes:
            await saver.aput_writes(saved, ws, task_id, path)


def insert_empty_rows(dsn: str, thread_id: str, steps: Sequence[Step]) -> None:
    """Explicit ``'empty'`` blob rows, as older official savers wrote for version bumps
    without a value."""
    rows = [(thread_id, st.ns, ch, ver) for st in steps for ch, ver in st.empty_rows]
    if not rows:
        return
    with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)"
            " VALUES (%s, %s, %s, %s, 'empty', NULL) ON CONFLICT DO NOTHING",
            rows,
        )


@contextlib.contextmanager
def skewed_clock(hours: float = 1.0) -> Iterator[None]:
    """Checkpoint ids made inside come from a clock ``hours`` behind, as on a second
    worker whose clock is behind: uuid6's monotonic guard is reset, as it is in another
    process, so a child made here sorts below the parent made before (langgraph#8550)."""
    from langgraph.checkpoint.base import id as id_mod

    shift = int(hours * 3600 * 1e9)

    class _Behind:
        @staticmethod
        def time_ns() -> int:
            return time.time_ns() - shift  # the real clock: id.py's `time` is the stdlib's

    id_mod._last_v6_timestamp = None
    try:
        with mock.patch.object(id_mod, "time", _Behind):  # id.py's module-level `time`
            yield
    finally:
        id_mod._last_v6_timestamp = None


