"""Argument checks of the savers' public calls, shared by the sync and async savers.

Every option is checked before any statement runs, so a wrong type never reaches SQL
(where, e.g., the string ``'no'`` is a valid boolean: ``prune(dry_run="no")`` once
deleted). A wrong type raises ``TypeError``, a value of the right type out of range
``ValueError``; both name the option and show what was passed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from uuid import UUID

#: The largest value of a Postgres ``int4`` (keep_last and the like are ``int`` in SQL).
INT4_MAX = 2**31 - 1
#: The largest value of a Postgres ``int8`` (a ``LIMIT``).
INT8_MAX = 2**63 - 1


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _kind(value: Any) -> str:
    return f"{type(value).__name__} {_shown(value)}"


def check_bool(name: str, value: Any) -> bool:
    """``value`` itself: a real ``bool`` (not 0/1, ``None`` or a string)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, not {_kind(value)}")
    return value


def check_int(
    name: str,
    value: Any,
    *,
    low: int | None,
    high: int | None = INT4_MAX,
    none_ok: bool = False,
) -> int | None:
    """An ``int`` (not a ``bool``) in ``[low, high]`` (``None``: unbounded), or ``None``
    when ``none_ok``."""
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        allowed = "an int or None" if none_ok else "an int"
        raise TypeError(f"{name} must be {allowed}, not {_kind(value)}")
    if (low is not None and value < low) or (high is not None and value > high):
        if high is None:
            want = f">= {low}"
        elif low is None:
            want = f"<= {high}"
        else:
            want = f"from {low} to {high}"
        raise ValueError(f"{name} must be an int {want}, not {_shown(value)}")
    return value


def check_str(name: str, value: Any, *, none_ok: bool = False) -> str | None:
    if value is None and none_ok:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str{' or None' if none_ok else ''}, not {_kind(value)}")
    return value


def check_id(name: str, value: Any) -> str:
    """A thread or run id as stored: a ``str``, or a ``UUID`` / ``int`` (as LangGraph's
    server passes some ids), as text. ``None``, ``bool``, ``bytes`` and the rest are
    refused rather than stored as ``'None'``, ``'True'``, ``"b'...'"``."""
    if isinstance(value, str):
        return value
    if isinstance(value, UUID) or (isinstance(value, int) and not isinstance(value, bool)):
        return str(value)
    raise TypeError(f"{name} must be a str (or a UUID), not {_kind(value)}")


def check_ids(name: str, value: Any, what: str) -> list[str]:
    """A sequence (list, tuple, set, ...) of ids, not a single ``str``; each as
    :func:`check_id`."""
    if isinstance(value, str | bytes):
        raise TypeError(
            f"{name} must be a sequence of {what}s, not a {type(value).__name__} "
            f"(wrap one id in a list: [{value!r}])"
        )
    if not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a sequence of {what}s, not {_kind(value)}")
    return [check_id(f"{name}[{i}]", v) for i, v in enumerate(value)]


def check_names(name: str, value: Any, what: str) -> list[str]:
    """A sequence of ``str`` (channel names), not a single ``str``."""
    if isinstance(value, str | bytes):
        raise TypeError(f"{name} must be a sequence of {what}s, not a {type(value).__name__}")
    if not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a sequence of {what}s, not {_kind(value)}")
    for i, v in enumerate(value):
        if not isinstance(v, str):
            raise TypeError(f"{name}[{i}] must be a str, not {_kind(v)}")
    return list(value)


def check_mapping(name: str, value: Any, *, none_ok: bool = True) -> Mapping[str, Any] | None:
    if value is None and none_ok:
        return None
    if not isinstance(value, Mapping):
        allowed = "a dict or None" if none_ok else "a dict"
        raise TypeError(f"{name} must be {allowed}, not {_kind(value)}")
    return value


def check_saver_options(
    *,
    cache_bytes: Any,
    pipeline: Any = False,
    pool_size: Any = None,
    prepare_threshold: Any = None,
) -> None:
    """The options of the constructors and ``from_conn_string`` (checked before
    ``from_conn_string`` connects)."""
    check_int("cache_bytes", cache_bytes, low=0, high=INT8_MAX)
    check_bool("pipeline", pipeline)
    check_int("pool_size", pool_size, low=1, none_ok=True)
    check_int("prepare_threshold", prepare_threshold, low=0, none_ok=True)
