"""Copies of decoded values: the pickles the cache, the list prefetch and a call's blob
decoder keep, and the unpickle that hands each answer a copy of its own.

Every answer that reuses a value gets a fresh ``pickle.loads`` of it (the isolation rule,
store.py). A long session's values are mostly LangChain messages, pydantic models: a
``get_state`` warm copies the 720 messages of the benchmark's deepagents head, and a whole
``get_state_history`` pass copies 414,000. Unpickled the default way, each model is
rebuilt by ``BUILD``: the unpickler makes the state dict of four entries, looks up the
class's ``__setstate__`` and calls it (Python), which sets the four attributes. Here a
model whose pickling is pydantic's own (``BaseModel.__getstate__`` / ``__setstate__``,
no ``__reduce__`` / ``__reduce_ex__`` / ``__new__`` of its class) is pickled as a call of
:func:`_model` with the four parts: the same object, the same attributes, set in the same
order, by one call. Measured on that head (720 messages, the collector off, 50 rounds):
2.04 ms -> 1.66 ms a copy (``python scripts/profile_copies.py``). Any other object,
a model with pickling of its own included, pickles exactly as ``pickle.dumps`` does.

These pickles never leave the process (the cache is in memory): the format is free to
change between versions.
"""

from __future__ import annotations

import copyreg
import io
import pickle
import weakref
from typing import Any

try:
    from pydantic import BaseModel
except ImportError:  # pragma: no cover - langchain-core requires pydantic 2
    BaseModel = None  # type: ignore[assignment,misc]

#: ``pickle.loads``: a copy of the value a :func:`dumps` pickle holds
loads = pickle.loads

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


#: class -> whether its instances pickle as pydantic's own (cached per class; a class
#: made at run time, e.g. by ``create_model``, is not kept alive by it)
_PLAIN: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()


def _plain(cls: type) -> bool:
    got = _PLAIN.get(cls)
    if got is None:
        got = _PLAIN[cls] = (
            BaseModel is not None
            and issubclass(cls, BaseModel)
            and cls.__getstate__ is BaseModel.__getstate__
            and cls.__setstate__ is BaseModel.__setstate__
            and cls.__reduce_ex__ is object.__reduce_ex__
            and cls.__reduce__ is object.__reduce__
            and cls.__new__ is object.__new__
            and getattr(cls, "__getnewargs_ex__", None) is None
            and getattr(cls, "__getnewargs__", None) is None
        )
    return got


class _Pickler(pickle.Pickler):
    """``pickle.Pickler`` with pydantic models as :func:`_model` calls (module
    docstring). ``reducer_override`` is not called for None, bools and exact ints,
    floats, str, bytes, dicts, sets, lists and tuples."""

    def reducer_override(self, obj: Any) -> Any:
        cls = type(obj)
        if not _plain(cls) or cls in copyreg.dispatch_table:  # a registered reducer wins
            return NotImplemented
        state = obj.__getstate__()
        if type(state) is not dict or len(state) != len(_STATE):
            return NotImplemented  # a pydantic whose state is not the one _model sets
        try:
            return _model, (cls, *(state[k] for k in _STATE))
        except KeyError:
            return NotImplemented


def dumps(value: Any) -> bytes:
    """The pickle (protocol 5) of ``value``; :data:`loads` of it is a copy. Raises what
    ``pickle.dumps`` raises for a value that does not pickle."""
    buf = io.BytesIO()
    _Pickler(buf, protocol=5).dump(value)
    return buf.getvalue()
