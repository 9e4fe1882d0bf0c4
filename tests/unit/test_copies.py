"""``_cache/copies.py``: a copy made through ``copies.dumps`` / ``copies.loads`` is the
object ``pickle`` would make (same classes, attributes, fields set, extras, private
attributes), shares no mutable object with the original, and a model with pickling of
its own is pickled exactly as ``pickle.dumps`` pickles it."""

from __future__ import annotations

import copyreg
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from pydantic import BaseModel, ConfigDict, PrivateAttr, RootModel

from langgraph_delta_postgres._cache import copies


class Extra(BaseModel):
    model_config = ConfigDict(extra="allow")
    a: int = 0


class Private(BaseModel):
    a: list[int] = []
    _seen: list[str] = PrivateAttr(default_factory=list)
    _unset: int = PrivateAttr()


class OwnState(BaseModel):
    a: int = 0

    def __getstate__(self) -> dict[Any, Any]:
        state = super().__getstate__()
        state["__dict__"] = {**state["__dict__"], "a": state["__dict__"]["a"] + 1}
        return state


class OwnReduce(BaseModel):
    a: int = 0

    def __reduce__(self) -> Any:
        return (OwnReduce, (), {"__dict__": {"a": 7}, "__pydantic_fields_set__": {"a"},
                                "__pydantic_extra__": None, "__pydantic_private__": None})


class Nested(BaseModel):
    inner: Extra
    items: list[Private]


class Ints(RootModel[list[int]]):
    pass


def parts(obj: Any) -> Any:
    """Everything pickling carries of a value, recursively, classes included."""
    if isinstance(obj, BaseModel):
        return (
            type(obj),
            parts(obj.__dict__),
            obj.__pydantic_fields_set__,
            parts(obj.__pydantic_extra__),
            parts(obj.__pydantic_private__),
        )
    if isinstance(obj, dict):
        return (dict, {k: parts(v) for k, v in obj.items()})
    if isinstance(obj, list | tuple):
        return (type(obj), [parts(v) for v in obj])
    return (type(obj), obj)


def mutable_ids(obj: Any, out: set[int] | None = None) -> set[int]:
    """ids of the mutable containers and models reachable from ``obj``."""
    out = set() if out is None else out
    if isinstance(obj, BaseModel):
        out.add(id(obj))
        for v in (obj.__dict__, obj.__pydantic_fields_set__, obj.__pydantic_extra__,
                  obj.__pydantic_private__):
            mutable_ids(v, out)
    elif isinstance(obj, dict):
        out.add(id(obj))
        for v in obj.values():
            mutable_ids(v, out)
    elif isinstance(obj, list | set):
        out.add(id(obj))
        for v in obj:
            mutable_ids(v, out)
    elif isinstance(obj, tuple):
        for v in obj:
            mutable_ids(v, out)
    return out


def check_copy(value: Any) -> None:
    reference = pickle.loads(pickle.dumps(value, protocol=5))
    got = copies.loads(copies.dumps(value))
    assert parts(got) == parts(reference) == parts(value)
    assert got == value
    assert not mutable_ids(got) & mutable_ids(value)


def messages(n: int) -> list[Any]:
    out: list[Any] = []
    for i in range(n):
        out.append(HumanMessage(f"do {i}", id=f"h{i}"))
        out.append(AIMessage(
            "", id=f"a{i}",
            tool_calls=[{"name": "write_file", "args": {"path": f"/f{i}", "text": "x" * i},
                         "id": f"c{i}"}],
            response_metadata={"model": "scripted"}, usage_metadata={
                "input_tokens": i, "output_tokens": 1, "total_tokens": i + 1},
        ))
        out.append(ToolMessage(f"wrote /f{i}", tool_call_id=f"c{i}", artifact={"n": [i]}))
    return out


def test_messages_copy_as_pickle_does() -> None:
    check_copy(messages(40))
    check_copy({"messages": messages(3), "files": {"/a": {"content": ["x"]}}})


def test_models_with_extras_private_attributes_nesting() -> None:
    e = Extra(a=1, b=[1, 2], c={"d": 3})
    p = Private(a=[1])
    p._seen.append("x")  # _unset stays unset: pickle leaves it out, so does the copy
    check_copy([e, p, Nested(inner=e, items=[p, Private()]), Ints([1, 2, 3])])
    got = copies.loads(copies.dumps(p))
    assert got._seen == ["x"] and got._seen is not p._seen
    with pytest.raises(AttributeError):
        _ = got._unset


def test_a_model_with_pickling_of_its_own_pickles_as_pickle_does() -> None:
    for value in (OwnState(a=1), OwnReduce(a=1), Ints([1]), [OwnState(a=2)]):
        assert copies.dumps(value) == pickle.dumps(value, protocol=5)
    assert copies.loads(copies.dumps(OwnState(a=1))).a == 2  # its __getstate__ ran
    assert copies.loads(copies.dumps(OwnReduce(a=1))).a == 7  # its __reduce__ ran


def test_a_plain_model_is_rebuilt_by_one_call() -> None:
    data = copies.dumps(AIMessage("hi", id="x"))
    plain = pickle.dumps(AIMessage("hi", id="x"), protocol=5)
    # pickle's BUILD state is a dict keyed by the four attribute names; ours passes the
    # four values to _model
    assert b"__pydantic_fields_set__" in plain and b"_model" not in plain
    assert b"_model" in data and b"__pydantic_fields_set__" not in data
    assert copies.loads(data) == AIMessage("hi", id="x")


class Registered(BaseModel):
    a: int = 0


def _registered(obj: Registered) -> Any:
    return Registered, (), {"__dict__": {"a": 99}, "__pydantic_fields_set__": {"a"},
                            "__pydantic_extra__": None, "__pydantic_private__": None}


def test_a_reducer_registered_with_copyreg_wins() -> None:
    assert copies.loads(copies.dumps(Registered(a=1))).a == 1  # plain: cached as such
    copyreg.pickle(Registered, _registered)
    try:
        assert copies.dumps(Registered(a=1)) == pickle.dumps(Registered(a=1), protocol=5)
        assert copies.loads(copies.dumps(Registered(a=1))).a == 99
    finally:
        del copyreg.dispatch_table[Registered]


def test_shared_objects_stay_shared_within_a_copy() -> None:
    m = AIMessage("hi", id="x")
    inner = [1, 2]
    got = copies.loads(copies.dumps({"a": [m, m], "b": inner, "c": inner}))
    assert got["a"][0] is got["a"][1] and got["b"] is got["c"]
    assert got["a"][0] is not m and got["b"] is not inner


def test_classes_made_at_run_time_are_not_kept_alive() -> None:
    import gc
    import weakref

    from pydantic import create_model

    made = create_model("Made", a=(int, 0))
    assert copies._plain(made)  # seen, and cached
    ref = weakref.ref(made)
    del made
    gc.collect()
    assert ref() is None


def test_what_does_not_pickle_raises_as_pickle_does() -> None:
    class Local(BaseModel):  # not importable by name
        a: int = 0

    for dump in (copies.dumps, lambda v: pickle.dumps(v, protocol=5)):
        with pytest.raises((pickle.PicklingError, AttributeError)):
            dump([Local()])
        with pytest.raises(TypeError):
            dump({"f": (x for x in ())})


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                    st.text(max_size=5))


@settings(max_examples=60, deadline=None)
@given(st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=3), inner, max_size=4),
        st.builds(lambda c, k: AIMessage(c, additional_kwargs=k), st.text(max_size=5),
                  st.dictionaries(st.text(max_size=3), inner, max_size=3)),
        st.builds(lambda a, b: Extra(a=a, b=b), st.integers(), inner),
    ),
    max_leaves=20,
))
def test_any_value_copies_as_pickle_does(value: Any) -> None:
    check_copy(value)
