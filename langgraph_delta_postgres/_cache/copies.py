"""Copies of decoded values: what the cache, the list prefetch and a call's blob decoder
keep of a value, and how each answer gets a copy of its own.

Every answer that reuses a value gets a copy of its own (the isolation rule, store.py),
and a copy must be what the saver's serializer would give: the official saver decodes
the stored (type, blob) with ``serde.loads_typed`` on every read, and that is the
reference. A ``pickle`` copy of the value serde gave is that only for types whose whole
state pickle carries and whose construction adds nothing to it. A pydantic model whose
``model_post_init`` makes a ``threading.Lock`` and whose ``__getstate__`` drops it comes
back from pickle without its lock, while the default serde's decode
(``JsonPlusSerializer``: ``cls(**fields)``) runs ``model_post_init`` again: when every
copy was a pickle, every such object of a warm ``get_state`` and of a whole
``get_state_history`` pass raised TypeError on use (``with None``), none of
``InMemorySaver``'s (tests/integration/test_faithful_copies.py).

**Proven types.** So a value is kept as a pickle only when it is made of types whose
pickle copy is proven to equal serde's decode; :func:`dumps` refuses any other
(:class:`Unproven`), and that value is kept as the (type, blob) it was decoded from,
decoded by serde again on every answer, as the official saver does. The proven types:

* None, bool, int, float, str, bytes, and list, tuple, dict, set of proven values
  (exact types: a subclass is not proven; frozenset and bytearray too, which pickle
  copies as it copies set and bytes);
* ``_DeltaSnapshot`` (langgraph's DeltaChannel snapshot: a NamedTuple, which pickle
  rebuilds as serde's decode builds it, ``_DeltaSnapshot(value)``);
* pydantic models whose pickling is pydantic's own (``BaseModel.__getstate__`` /
  ``__setstate__``, no ``__reduce__`` / ``__reduce_ex__`` / ``__new__`` of the class, no
  reducer registered with ``copyreg``) and whose ``model_post_init`` is pydantic's (none,
  or its private-attribute initialiser); their fields, extras and private attributes are
  checked as values. Serde rebuilds a model with ``cls(**model_dump())``, which runs the
  class's ``__init__``, validators and default factories on every decode: a pickle copy
  of one decode equals the next only if those are deterministic, which no check can
  prove of a function. So a model is proven only if no function of its own runs when it
  is built (its core schema calls none, its ``__init__`` is pydantic's; default
  factories ``list`` / ``dict`` / ``set`` and the like are allowed), and a model with a
  validator goes through serde (a deterministic validator would copy faithfully; one
  that stamps a time or counts its calls would not, and they look the same);
* LangChain's messages (the classes of ``langchain_core.messages``): their ``__init__``
  and validators (``AIMessage._backwards_compat_tool_calls``, ``ToolMessage.coerce_args``,
  the chunks' ``init_tool_calls``) compute fields from the given fields alone, read in
  langchain-core 1.8; the pydantic conditions above other than the validators still
  apply, so a version that adds a ``model_post_init`` leaves the fast path by itself.

The check is made while pickling: pickle calls :meth:`_Pickler.reducer_override` for
every object that is not of an exact built-in type (which it copies itself), as it did
for the one-call models below, and the verdict is cached per class. Where it happens: a
call decodes its blobs through a :class:`Decoder`, which remembers the blob of each
value; :meth:`Decoder.dumps` pickles what it can and keeps the values :func:`dumps`
refuses (or that do not pickle at all) as their blobs, persistent ids in the pickle, so
such a pickle (a :class:`Kept`) is decoded by serde value by value in :func:`loads`.
Values of proven types take the path they took before: the benchmark's deepagents
session (150 turns) keeps nothing as a blob in 5 warm ``get_state`` and 2 whole history
passes (1,150 entries).

**One call per model.** Unpickled the default way, each model is rebuilt by ``BUILD``:
the unpickler makes the state dict of four entries, looks up the class's
``__setstate__`` and calls it (Python), which sets the four attributes. Here a proven
model is pickled as a call of :func:`_model` with the four parts: the same object, the
same attributes, set in the same order, by one call. Kept because it wins counted as a
whole process: with pickle's own reduction instead, two whole history passes and 10 warm
``get_state`` of the 150-turn session took 1.049x as long (the process 1.053x; 10 pairs,
load average about 1; ``python scripts/gc_copies_whole_process.py --dsn <Postgres 15>
--db NAME --ab 10 --variants as-is,plain-pickle``); 10 more turns, 1.025x (8 pairs).

**Measured** on that session's head (720 messages), on 2 shared cores, the collector off
for the copies (``python scripts/profile_copies.py --dsn <Postgres 15> --db NAME
--rounds 200 --ab 7 --against <7d88878>/langgraph_delta_postgres/_cache/copies.py``,
three runs at load average 1.8-2.9, medians of pair-by-pair ratios):

* the check costs nothing measurable: :func:`dumps` / :func:`loads` against 7d88878's
  (before the check), interleaved in one process, 0.99x / 1.00x (quartiles within 6%);
  and end to end, the saver of 7d88878 against this one in 8 interleaved pairs of
  processes (``--times-only``, PYTHONPATH set to each, load average 1.0-2.4): warm
  ``get_state`` (31 calls) 158 / 158 ms, a new saver's ``get_state`` 17.4 / 17.5 ms, a
  whole ``get_state_history`` pass 5.30 / 5.26 s (1.00x, 1.02x, 1.01x);
* the one call per model still earns its place: a copy 1.23x-1.28x faster than pickle's
  own ``BUILD`` (1.70 vs 2.10 ms), a warm ``get_state`` 1.07x-1.22x; a new saver's
  ``get_state`` (0.94x-1.01x) and a whole history pass (0.92x-1.07x) are within the
  noise of the machine.

These pickles never leave the process (the cache is in memory): the format is free to
change between versions.
"""

from __future__ import annotations

import copyreg
import inspect
import io
import pickle
import weakref
from collections.abc import Callable
from typing import Any

from langgraph.checkpoint.serde.types import _DeltaSnapshot
from pydantic import BaseModel

try:
    from pydantic._internal._model_construction import init_private_attributes
except ImportError:  # pragma: no cover - a pydantic that moved it: such models use serde
    init_private_attributes = None  # type: ignore[assignment]

#: serde's decode of a stored value: ``serde.loads_typed((type, blob))``
Decode = Callable[[tuple[str, bytes]], Any]

#: Errors a value that does not pickle raises.
UNPICKLABLE = (pickle.PicklingError, TypeError, AttributeError, RecursionError)


class Unproven(pickle.PicklingError):
    """The value holds an object whose pickle copy is not proven to be what serde's
    decode gives (module docstring, "Proven types")."""


class Kept(bytes):
    """A pickle in which some values are kept as the (type, blob) they were decoded from
    (persistent ids): :func:`loads` decodes each of them with serde."""

    __slots__ = ()


#: the keys of ``BaseModel.__getstate__``'s state, in ``BaseModel.__setstate__``'s order
_STATE = ("__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__", "__dict__")

_new = object.__new__
_set = object.__setattr__


def _model(cls: type, fields_set: Any, extra: Any, private: Any, dict_: Any) -> Any:
    """A model as ``BaseModel.__setstate__`` rebuilds it from its state (unpickling)."""
    obj: Any = _new(cls)
    _set(obj, "__pydantic_fields_set__", fields_set)
    _set(obj, "__pydantic_extra__", extra)
    _set(obj, "__pydantic_private__", private)
    _set(obj, "__dict__", dict_)
    return obj


#: how :class:`_Pickler` pickles an instance of a class
_UNPROVEN, _ONE_CALL, _AS_PICKLE = 0, 1, 2

#: class -> its verdict (cached per class; a class made at run time, e.g. by
#: ``create_model``, is not kept alive by it)
_HOW: weakref.WeakKeyDictionary[type, int] = weakref.WeakKeyDictionary()

#: default factories that build the same plain value every time
_PLAIN_FACTORIES = frozenset((list, dict, set, tuple, frozenset, str, bytes, int, float, bool))


def _how(cls: type) -> int:
    got = _HOW.get(cls)
    if got is None:
        if cls is _DeltaSnapshot or issubclass(cls, type):
            got = _AS_PICKLE  # rebuilt by its constructor / pickled by name
        elif issubclass(cls, BaseModel) and _own_pickling(cls) and _own_post_init(cls) and (
            cls.__module__.startswith("langchain_core.messages.") or _builds_plainly(cls)
        ):
            got = _ONE_CALL
        else:
            got = _UNPROVEN
        _HOW[cls] = got
    return got


def _own_pickling(cls: type[BaseModel]) -> bool:
    """Instances pickle as pydantic's own (no pickling of the class's own)."""
    return (
        cls.__getstate__ is BaseModel.__getstate__
        and cls.__setstate__ is BaseModel.__setstate__
        and cls.__reduce_ex__ is object.__reduce_ex__
        and cls.__reduce__ is object.__reduce__
        and cls.__new__ is object.__new__
        and getattr(cls, "__getnewargs_ex__", None) is None
        and getattr(cls, "__getnewargs__", None) is None
    )


def _own_post_init(cls: type[BaseModel]) -> bool:
    """``model_post_init`` is pydantic's: none, or its private-attribute initialiser
    (which pydantic wraps in a subclass of a class with private attributes)."""
    post = inspect.unwrap(cls.model_post_init)
    return post is BaseModel.model_post_init or (
        init_private_attributes is not None and post is init_private_attributes
    )


def _builds_plainly(cls: type[BaseModel]) -> bool:
    """No function of the class's own runs when serde builds it: its ``__init__`` is
    pydantic's, its core schema calls no function (validators) and makes defaults with
    plain factories only, and so do its private attributes. Nested models are checked as
    values of their own, so their schemas are not walked here; serializers run when a
    value is stored, not when it is built, so they are not looked at."""
    if cls.__init__ is not BaseModel.__init__:
        return False
    for attr in getattr(cls, "__private_attributes__", {}).values():
        factory = getattr(attr, "default_factory", None)
        if factory is not None and factory not in _PLAIN_FACTORIES:
            return False
    schema = getattr(cls, "__pydantic_core_schema__", None)
    return isinstance(schema, dict) and _calls_nothing(schema, cls, set())


def _calls_nothing(node: Any, cls: type, seen: set[int]) -> bool:
    if isinstance(node, list):
        return all(_calls_nothing(v, cls, seen) for v in node)
    if not isinstance(node, dict) or id(node) in seen:
        return True
    seen.add(id(node))
    if node.get("type") == "model" and node.get("cls") is not cls:
        return True  # another model: its instances are checked on their own
    for key, v in node.items():
        if key in ("serialization", "metadata", "cls", "ref"):
            continue
        if key == "default_factory":
            if v not in _PLAIN_FACTORIES:
                return False
        elif key == "custom_init":
            if v:
                return False
        elif callable(v) or not _calls_nothing(v, cls, seen):
            return False
    return True


class _Pickler(pickle.Pickler):
    """``pickle.Pickler`` that refuses unproven types (:class:`Unproven`) and pickles a
    proven model as a :func:`_model` call (module docstring). ``reducer_override`` is
    not called for None, bools and exact ints, floats, str, bytes, dicts, sets,
    frozensets, lists, tuples and bytearrays."""

    def reducer_override(self, obj: Any) -> Any:
        cls = type(obj)
        how = _HOW.get(cls)
        if how is None:
            how = _how(cls)
        if how == _ONE_CALL:
            if cls in copyreg.dispatch_table:
                raise Unproven(f"{cls.__qualname__} has a reducer registered with copyreg")
            state = obj.__getstate__()
            if type(state) is not dict or len(state) != len(_STATE):
                raise Unproven(f"{cls.__qualname__}: a state _model does not set")
            try:
                return _model, (cls, *(state[k] for k in _STATE))
            except KeyError:
                raise Unproven(f"{cls.__qualname__}: a state _model does not set") from None
        if how == _AS_PICKLE or obj is _model:
            return NotImplemented
        raise Unproven(f"a {cls.__module__}.{cls.__qualname__} is not proven to copy faithfully")


def dumps(value: Any) -> bytes:
    """The pickle (protocol 5) of ``value``; :func:`loads` of it is a copy. Raises
    :class:`Unproven` for a value that holds an object of an unproven type, and what
    ``pickle.dumps`` raises for a value that does not pickle."""
    buf = io.BytesIO()
    _Pickler(buf, protocol=5).dump(value)
    return buf.getvalue()


class _Unpickler(pickle.Unpickler):
    """Unpickles a :class:`Kept`: each persistent id is a (type, blob), given to
    ``decode``."""

    def __init__(self, data: bytes, decode: Callable[[Any], Any]) -> None:
        super().__init__(io.BytesIO(data))
        self._decode = decode

    def persistent_load(self, pid: Any) -> Any:
        return self._decode(pid)


_loads = pickle.loads


def loads(data: bytes, decode: Decode) -> Any:
    """A copy of the value ``data`` holds (a pickle of :func:`dumps`, or a
    :class:`Kept` whose kept values are decoded by ``decode``, serde's
    ``loads_typed``)."""
    if type(data) is bytes:
        return _loads(data)
    return _Unpickler(data, decode).load()


class _Blob(tuple):  # type: ignore[type-arg]
    """A kept value not decoded yet: its (type, blob) (:func:`loads_writes`)."""

    __slots__ = ()


def loads_writes(data: bytes, upto: int, decode: Decode) -> list[Any]:
    """``loads(data, decode)[:upto]`` of a pickled list of lists of writes ``(task_id,
    channel, value)`` (the history cache's segments, store.py): of a :class:`Kept`, only
    the values of the first ``upto`` lists are decoded."""
    if type(data) is bytes:
        return _loads(data)[:upto]  # type: ignore[no-any-return]
    got = _Unpickler(data, _Blob).load()[:upto]
    return [
        [(t, c, decode(v) if type(v) is _Blob else v) for t, c, v in ws] for ws in got
    ]


class _KeepPickler(_Pickler):
    """:class:`_Pickler` that keeps a value decoded from a blob (``blobs``: id -> (value,
    (type, blob))) as a persistent id when :func:`dumps` refuses it or it does not pickle."""

    def __init__(self, file: io.BytesIO, blobs: dict[int, tuple[Any, tuple[str, bytes]]],
                 verdicts: dict[int, bool]) -> None:
        super().__init__(file, protocol=5)
        self._blobs = blobs
        #: id -> whether the value pickles (shared by a Decoder's calls)
        self._verdicts = verdicts
        self.kept = False

    def persistent_id(self, obj: Any) -> Any:
        got = self._blobs.get(id(obj))
        if got is None or got[0] is not obj:
            return None
        ok = self._verdicts.get(id(obj))
        if ok is None:
            try:
                dumps(obj)
                ok = True
            except UNPICKLABLE:
                ok = False
            self._verdicts[id(obj)] = ok
        if ok:
            return None
        self.kept = True
        return got[1]


class Decoder:
    """serde's decode of one call's blobs, each value remembered with the (type, blob) it
    came from, so that :meth:`dumps` can keep a value that is not proven (or does not
    pickle) as its blob. Holds the values it decoded until it goes."""

    __slots__ = ("decode", "_blobs", "_verdicts")

    def __init__(self, decode: Decode) -> None:
        self.decode = decode
        self._blobs: dict[int, tuple[Any, tuple[str, bytes]]] = {}
        self._verdicts: dict[int, bool] = {}

    def __call__(self, typed: tuple[str, bytes]) -> Any:
        value = self.decode(typed)
        self._blobs[id(value)] = (value, typed)
        return value

    def dumps(self, obj: Any) -> bytes:
        """The pickle of ``obj``, a structure of values this decoder gave (and plain
        data): :func:`dumps`'s when it takes it, else a :class:`Kept` with the values it
        refuses kept as their blobs. Raises what pickling raises for a part of ``obj``
        that is neither proven nor a value decoded here."""
        try:
            return dumps(obj)
        except UNPICKLABLE:
            if not self._blobs:
                raise
        buf = io.BytesIO()
        pickler = _KeepPickler(buf, self._blobs, self._verdicts)
        pickler.dump(obj)
        return Kept(buf.getvalue()) if pickler.kept else buf.getvalue()


def keep(value: Any, typed: tuple[str, bytes]) -> bytes:
    """What is kept of one value decoded from ``typed``: its pickle, or (not proven, or
    does not pickle) a :class:`Kept` of its blob alone."""
    try:
        return dumps(value)
    except UNPICKLABLE:
        buf = io.BytesIO()
        _KeepPickler(buf, {id(value): (value, typed)}, {id(value): False}).dump(value)
        return Kept(buf.getvalue())
