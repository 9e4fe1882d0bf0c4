"""Copies are what the serializer gives (_cache/copies.py, "Proven types").

The values the history cache, the list prefetch and a call's blob decoder hand out again
are copies; a copy must be what ``serde.loads_typed`` of the stored blob gives, as the
official saver and ``InMemorySaver`` read every value. Through a real compiled graph with
a DeltaChannel, on every read path (``get_state`` cold and warm with the cache, by
checkpoint id, a whole ``get_state_history`` pass and pages of it, which the list prefetch
answers, ``list``; sync and async):

* a pydantic model whose ``model_post_init`` makes a lock and whose ``__getstate__``
  drops it works (its lock is there) and equals what ``InMemorySaver`` gives (a pickle
  copy has no lock: ``with None`` raised TypeError);
* a model with a validator that transforms its field equals ``InMemorySaver``'s, and one
  whose validator stamps every construction is built afresh for every answer, as
  ``InMemorySaver`` builds it (a pickle copy repeats the first decode's stamp);
* LangChain messages still take the fast path: a warm ``get_state`` decodes none of them
  with serde (the saver's ``serde`` counts), while it decodes the unproven models.
"""

from __future__ import annotations

import itertools
import threading
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.graph import START, StateGraph
from pydantic import BaseModel, field_validator, model_validator

from langgraph_delta_postgres import AsyncDeltaPostgresSaver, DeltaPostgresSaver
from tests._models import Locked
from tests.graph._reducers import append_reducer
from tests.graph._util import canon
from tests.integration._helpers import CountingSerde

TURNS = 7
_LOCK = type(threading.Lock())


class Shouted(BaseModel):
    """A validator that transforms (on every construction, so on every decode too)."""

    text: str

    @field_validator("text")
    @classmethod
    def _shout(cls, v: str) -> str:
        return v + "!"


_BUILT = itertools.count()


class Stamped(BaseModel):
    """A validator that stamps each construction with a new number."""

    text: str
    built: int = -1

    @model_validator(mode="after")
    def _stamp(self) -> Stamped:
        self.built = next(_BUILT)
        return self


class State(TypedDict):
    items: Annotated[list[Any], DeltaChannel(append_reducer, snapshot_frequency=3)]


def _models(state: State) -> dict[str, Any]:
    n = len(state["items"])
    return {"items": [Locked(name=f"l{n}"), Shouted(text=f"s{n}"), Stamped(text=f"t{n}")]}


def _messages(state: State) -> dict[str, Any]:
    n = len(state["items"])
    return {"items": [AIMessage(content=f"reply {n} " + "x" * 200, id=f"a{n}")]}


def _graph(saver: Any, node: Any) -> Any:
    b = StateGraph(State)
    b.add_node("node", node)
    b.add_edge(START, "node")
    return b.compile(checkpointer=saver)


def _cfg(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def _models_input(i: int) -> dict[str, Any]:
    return {"items": [Locked(name=f"in{i}")]}


def _messages_input(i: int) -> dict[str, Any]:
    return {"items": [HumanMessage(content=f"turn {i} " + "y" * 200, id=f"h{i}")]}


def _kinds(value: Any) -> list[str]:
    """What CountingSerde counts: the kinds of objects in a decoded value."""
    kinds = []
    for obj in _objects(value):
        if isinstance(obj, BaseMessage):
            kinds.append("message")
        elif isinstance(obj, Locked | Shouted | Stamped):
            kinds.append("model")
    return kinds


def _objects(v: Any) -> list[Any]:
    if isinstance(v, _DeltaSnapshot):
        return _objects(v.value)
    if isinstance(v, list | tuple):
        return [o for x in v for o in _objects(x)]
    if isinstance(v, dict):
        return [o for x in v.values() for o in _objects(x)]
    return [v]


def form(v: Any) -> Any:
    """A comparable form of a value; uses every Locked (raises if its lock is gone)."""
    if isinstance(v, Locked):
        assert isinstance(v._lock, _LOCK), f"{v!r} lost its lock"
        return ("Locked", v.use())
    if isinstance(v, Stamped):
        return ("Stamped", v.text)  # its stamp differs per construction, whoever builds
    if isinstance(v, _DeltaSnapshot):
        return ("_DeltaSnapshot", form(v.value))
    if isinstance(v, dict):
        return ("dict", tuple(sorted((str(k), form(x)) for k, x in v.items())))
    if isinstance(v, list | tuple):
        return ("seq", tuple(form(x) for x in v))
    return canon(v)


def stamps(v: Any) -> list[int]:
    return [o.built for o in _objects(v) if isinstance(o, Stamped)]


def check_fresh(answers: list[Any]) -> None:
    """Each answer's Stamped objects were built after the previous answer's (serde built
    them for this answer)."""
    for before, after in itertools.pairwise(answers):
        assert stamps(before) and stamps(after)
        assert min(stamps(after)) > max(stamps(before))


def _reference() -> tuple[list[Any], list[Any], list[Any]]:
    """InMemorySaver's: the latest state's items three times, and a history pass."""
    graph = _graph(InMemorySaver(), _models)
    for i in range(TURNS):
        graph.invoke(_models_input(i), _cfg("ref"))
    states = [graph.get_state(_cfg("ref")).values["items"] for _ in range(3)]
    check_fresh(states)
    history = [(s.values.get("items"), s.next) for s in graph.get_state_history(_cfg("ref"))]
    return [form(s) for s in states], states, [form(h) for h in history]


def test_models_read_back_as_the_serializer_gives_them(dsn: str) -> None:
    want_state, _, want_history = _reference()
    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        graph = _graph(saver, _models)
        for i in range(TURNS):
            graph.invoke(_models_input(i), _cfg("models"))
        cache = saver.history_cache
        assert cache is not None
        # get_state: cold, then warm (the head's value held from the second read on, the
        # chains in the cache): every answer works and equals InMemorySaver's
        states = [graph.get_state(_cfg("models")).values["items"] for _ in range(4)]
        assert cache.chain_hits > 0
        assert all(form(s) == want_state[0] for s in states)
        check_fresh(states)
        assert len({id(s[0]) for s in states}) == len(states)  # copies of their own
        # whole history passes (the list prefetch answers them) and pages
        for _ in range(2):
            history = list(graph.get_state_history(_cfg("models")))
            assert [form((s.values.get("items"), s.next)) for s in history] == want_history
            page = [(s.values.get("items"), s.next)
                    for s in graph.get_state_history(_cfg("models"), limit=4)]
            assert [form(p) for p in page] == want_history[:4]
        # states by checkpoint id (get_tuple by id, values the cache holds)
        for snap in history[:5]:
            for _ in range(2):
                got = graph.get_state(snap.config)
                assert form((got.values.get("items"), got.next)) == form(
                    (snap.values.get("items"), snap.next)
                )
        # list: the tuples' values (a blob carried over by many rows is copied per row)
        for tup in saver.list(_cfg("models")):
            form(tup.checkpoint["channel_values"])
        # and what the cache holds gives working values on the next answers too
        again = [graph.get_state(_cfg("models")).values["items"] for _ in range(2)]
        assert all(form(s) == want_state[0] for s in again)
        check_fresh([*states, *again])


async def test_models_read_back_as_the_serializer_gives_them_async(dsn: str) -> None:
    want_state, _, want_history = _reference()
    async with AsyncDeltaPostgresSaver.from_conn_string(dsn) as saver:
        graph = _graph(saver, _models)
        for i in range(TURNS):
            await graph.ainvoke(_models_input(i), _cfg("models"))
        states = [(await graph.aget_state(_cfg("models"))).values["items"] for _ in range(4)]
        assert saver.history_cache is not None and saver.history_cache.chain_hits > 0
        assert all(form(s) == want_state[0] for s in states)
        check_fresh(states)
        for _ in range(2):
            history = [s async for s in graph.aget_state_history(_cfg("models"))]
            assert [form((s.values.get("items"), s.next)) for s in history] == want_history
        async for tup in saver.alist(_cfg("models")):
            form(tup.checkpoint["channel_values"])


def test_cache_off_reads_back_as_the_serializer_gives_them(dsn: str) -> None:
    """Without the cache, the list prefetch and the blob decoder still copy."""
    want_state, _, want_history = _reference()
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as saver:
        graph = _graph(saver, _models)
        for i in range(TURNS):
            graph.invoke(_models_input(i), _cfg("models"))
        assert form(graph.get_state(_cfg("models")).values["items"]) == want_state[0]
        for _ in range(2):
            history = list(graph.get_state_history(_cfg("models")))
            assert [form((s.values.get("items"), s.next)) for s in history] == want_history


def test_messages_keep_the_fast_path_and_models_are_decoded_per_answer(dsn: str) -> None:
    serde = CountingSerde(_kinds)
    with DeltaPostgresSaver.from_conn_string(dsn, serde=serde) as saver:
        messages, models = _graph(saver, _messages), _graph(saver, _models)
        for i in range(TURNS):
            messages.invoke(_messages_input(i), _cfg("messages"))
            models.invoke(_models_input(i), _cfg("models"))
        for graph, thread in ((messages, "messages"), (models, "models")):
            for _ in range(2):  # the second read keeps the head's value, the chains kept
                graph.get_state(_cfg(thread))
        serde.decoded.clear()
        for _ in range(3):
            got = messages.get_state(_cfg("messages")).values["items"]
            assert len(got) == 2 * TURNS and all(isinstance(m, BaseMessage) for m in got)
        assert serde.decoded["message"] == 0  # every warm answer copied from the cache
        for _ in range(3):
            got = models.get_state(_cfg("models")).values["items"]
            assert form(got) and len(got) == 4 * TURNS
        # every warm answer decoded its models with serde: 4 a turn, 3 answers
        assert serde.decoded["model"] >= 3 * 4 * TURNS
