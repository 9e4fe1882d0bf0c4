"""A worker process of the deployment-shape test (test_deployment_shape.py).

Run as ``python -m tests.graph._deploy_worker KIND DSN`` from the repository root, with
the package to test first on ``sys.path`` (the release archive's copy, for the previous
release). KIND: ``ours`` (this package's savers), ``official``
(langgraph-checkpoint-postgres). Reads one JSON command per line on stdin, answers one
JSON line on stdout: ``{"ok": value}`` or ``{"error": "Type: message"}``.

Commands (``thread``: the thread id):
  turn     a run of the graph (a fan-out with ``Send``), input ``text``
  read     what this process reads of the thread: per saver (``warm``: the worker's
           long-lived saver, its cache warm; ``nocache``: a long-lived saver with
           ``cache_bytes=0``; ``cold``: a new saver), the state and the whole history
  late     a write added to the ``back``-th checkpoint below the latest, or to
           ``checkpoint_id`` (put_writes)
  reput    the ``back``-th checkpoint below the latest put again (same id and parent)
  prune    ``prune(keep_last)`` of the thread (ours only; ``compact``: with the graph)
  delete   ``delete_thread``
"""

from __future__ import annotations

import json
import operator
import sys
from contextlib import ExitStack
from typing import Annotated, Any, TypedDict

from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

# imports nothing else: this module runs next to the previous release's package too
from tests.graph._reducers import append_reducer

FAN_OUT = 4


class State(TypedDict):
    messages: Annotated[list[str], DeltaChannel(append_reducer, snapshot_frequency=40)]
    log: Annotated[list[str], DeltaChannel(append_reducer, snapshot_frequency=5)]
    turns: Annotated[int, operator.add]


class Task(TypedDict):
    text: str
    i: int


def builder() -> StateGraph[Any]:
    g = StateGraph(State)

    def start(state: State) -> dict[str, Any]:
        return {"turns": 1, "log": [f"turn{state.get('turns', 0)}"]}

    def fan(state: State) -> list[Send]:
        text = state["messages"][-1] if state.get("messages") else "?"
        return [Send("work", {"text": text, "i": i}) for i in range(FAN_OUT)]

    def work(task: Task) -> dict[str, Any]:
        return {"messages": [f"{task['text']}/{task['i']}"]}

    def join(state: State) -> dict[str, Any]:
        return {"log": [f"joined{len(state['messages'])}"]}

    g.add_node("start", start)
    g.add_node("work", work)  # type: ignore[arg-type]  # langgraph stub: arg named "state"
    g.add_node("join", join)
    g.add_edge(START, "start")
    g.add_conditional_edges("start", fan, ["work"])
    g.add_edge("work", "join")
    g.add_edge("join", END)
    return g


def canon(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): canon(x) for k, x in sorted(v.items())}
    if isinstance(v, list | tuple):
        return [canon(x) for x in v]
    if v is None or isinstance(v, bool | int | float | str):
        return v
    return repr(v)


def observe(graph: Any, thread: str) -> dict[str, Any]:
    """The state and the whole history of ``thread`` as this graph reads them."""
    cfg = {"configurable": {"thread_id": thread}}
    snap = graph.get_state(cfg)
    history = [
        [s.config["configurable"]["checkpoint_id"], canon(s.values), list(s.next)]
        for s in graph.get_state_history(cfg)
    ]
    return {"state": canon(snap.values), "next": list(snap.next), "history": history}


class Worker:
    def __init__(self, kind: str, dsn: str) -> None:
        self.kind, self.dsn = kind, dsn
        self.stack = ExitStack()
        self.warm = self._open(cache=True)
        self.nocache = self._open(cache=False) if kind == "ours" else None
        self.graph = builder().compile(checkpointer=self.warm)

    def _open(self, cache: bool) -> Any:
        if self.kind == "official":
            from langgraph.checkpoint.postgres import PostgresSaver

            return self.stack.enter_context(PostgresSaver.from_conn_string(self.dsn))
        from langgraph_delta_postgres import DeltaPostgresSaver

        kw: dict[str, Any] = {} if cache else {"cache_bytes": 0}
        return self.stack.enter_context(DeltaPostgresSaver.from_conn_string(self.dsn, **kw))

    def _tuples(self, thread: str) -> list[Any]:
        return list(self.warm.list({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}))

    def turn(self, thread: str, text: str) -> Any:
        out = self.graph.invoke({"messages": [text]}, {"configurable": {"thread_id": thread}})
        return canon(out)

    def read(self, thread: str) -> Any:
        got = {"warm": observe(self.graph, thread)}
        if self.nocache is not None:
            got["nocache"] = observe(builder().compile(checkpointer=self.nocache), thread)
        with ExitStack() as stack:
            if self.kind == "official":
                got["cold"] = got["warm"]  # the official saver holds nothing between calls
            else:
                from langgraph_delta_postgres import DeltaPostgresSaver

                cold = stack.enter_context(DeltaPostgresSaver.from_conn_string(self.dsn))
                got["cold"] = observe(builder().compile(checkpointer=cold), thread)
        return got

    def late(self, thread: str, back: int, text: str, checkpoint_id: str | None = None) -> Any:
        if checkpoint_id is None:
            tuples = self._tuples(thread)
            if len(tuples) < 2:  # nothing with a child to write late to
                return None
            # a pruned thread lists few checkpoints: the oldest listed one, then
            back = min(back, len(tuples) - 1)
            checkpoint_id = tuples[back].config["configurable"]["checkpoint_id"]
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": "",
                                   "checkpoint_id": checkpoint_id}}
        self.warm.put_writes(config, [("messages", [text])], task_id=f"late-{text}",
                             task_path="~late")
        return checkpoint_id

    def reput(self, thread: str, back: int) -> Any:
        tuples = self._tuples(thread)
        if len(tuples) <= back or tuples[back].parent_config is None:
            return None
        tup = tuples[back]
        self.warm.put(tup.parent_config, tup.checkpoint, tup.metadata, {})
        return tup.config["configurable"]["checkpoint_id"]

    def prune(self, thread: str, keep_last: int, compact: bool = False) -> Any:
        if compact:  # this release only: the previous one has no graph argument
            self.warm.prune([thread], keep_last=keep_last, graph=self.graph)
        else:
            self.warm.prune([thread], keep_last=keep_last)
        return None

    def delete(self, thread: str) -> Any:
        self.warm.delete_thread(thread)
        return None


def main() -> None:
    kind, dsn = sys.argv[1], sys.argv[2]
    import langgraph_delta_postgres

    worker = Worker(kind, dsn)
    print(json.dumps({"ok": {"package": langgraph_delta_postgres.__file__}}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd.pop("op")
        try:
            out: Any = {"ok": getattr(worker, op)(**cmd)}
        except Exception as exc:  # noqa: BLE001 - reported to the test, which decides
            out = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(out), flush=True)
    worker.stack.close()


if __name__ == "__main__":
    main()
