"""The errors this package raises, in one place (all importable from the package too).

``DeltaPruneError`` is no longer raised: importing it still works, with a
``DeprecationWarning`` (see :func:`__getattr__`).
"""

from __future__ import annotations

import shlex
import warnings
from typing import Any

import psycopg


class DeltaPostgresError(Exception):
    """The base of every error this package raises on its own: ``except
    DeltaPostgresError`` catches them all. Each error also keeps the built-in or psycopg
    base it always had (``RuntimeError``, ``ValueError``, psycopg's ``UndefinedTable`` /
    ``OperationalError``), so ``except`` clauses written for those still catch it."""


class HistoryError(DeltaPostgresError, RuntimeError):
    """The parent chain of a checkpoint is corrupt (a checkpoint met twice: a cycle of
    parent pointers) or deeper than ``max_history_depth``."""


class PrunedValueError(HistoryError):
    """A checkpoint's state cannot be rebuilt: a value of a channel LangGraph replays
    (a DeltaChannel) that the checkpoint, or one of its chain, claims to store is gone,
    and so is that checkpoint's parent, while older checkpoints of its namespace remain.
    Retention (``prune``, ``delete_for_runs``; or ``delete_thread`` while several runs
    wrote to the thread) deleted them while a run was writing this checkpoint on top of
    them (a run forking from a checkpoint prune was deleting). Read on, the state would
    silently restart from an empty value. Raised by ``get_delta_channel_history``; a
    subclass of :class:`HistoryError`."""


class CorruptCheckpointError(DeltaPostgresError, RuntimeError):
    """A stored checkpoint row is not a checkpoint (e.g. its JSON is ``{}``)."""


class SetupRequiredError(DeltaPostgresError, psycopg.errors.UndefinedTable):
    """The checkpoint tables (or columns) this package needs are missing: run ``setup()``.

    A subclass of the ``UndefinedTable`` error it replaces, so existing handlers still
    catch it; that error is its ``__cause__``.
    """


class MigrationError(DeltaPostgresError, RuntimeError):
    """Migrations cannot be applied as they are (drift, a bad file, a busy connection)."""


class ReplicaMismatchError(DeltaPostgresError, ValueError):
    """A replica given to a routing saver is not a hot standby of the primary's cluster
    on the primary's timeline (another cluster's server, a server not in recovery, a
    standby of another timeline): its WAL positions say nothing about the primary's."""


class LostParentError(DeltaPostgresError, RuntimeError):
    """A put after a failover names a parent checkpoint the (new) server does not have:
    the run was building on commits the promoted standby never received. Nothing was
    written; load the thread's state again."""


class StaleServerError(DeltaPostgresError, psycopg.OperationalError):
    """A pooled connection reaches the server this saver used before a failover: it is
    closed instead of lent (the caller may retry; the pool opens a new one)."""


class _DeltaPruneError(DeltaPostgresError, RuntimeError):
    """A maintenance call would leave a DeltaChannel thread unable to rebuild its state.

    No longer raised: ``prune`` and ``delete_for_runs`` keep what DeltaChannel state
    needs instead of refusing. Kept so that code catching it still imports."""


_DeltaPruneError.__name__ = _DeltaPruneError.__qualname__ = "DeltaPruneError"

#: Names that still import, with a DeprecationWarning, and what they are.
_DEPRECATED: dict[str, tuple[Any, str]] = {
    "DeltaPruneError": (
        _DeltaPruneError,
        "DeltaPruneError is deprecated and never raised: prune and delete_for_runs keep "
        "what DeltaChannel state needs instead of refusing; stop catching it",
    ),
}


def _deprecated(module: str, name: str) -> Any:
    """A deprecated name of ``module`` (a module ``__getattr__``): warn, then return it."""
    try:
        value, why = _DEPRECATED[name]
    except KeyError:
        raise AttributeError(f"module {module!r} has no attribute {name!r}") from None
    warnings.warn(why, DeprecationWarning, stacklevel=3)
    return value


def __getattr__(name: str) -> Any:
    return _deprecated(__name__, name)


def setup_required(
    error: psycopg.Error, schema: str | None, *, cli: bool = False
) -> SetupRequiredError:
    """The SetupRequiredError of ``error`` (an UndefinedTable/UndefinedColumn of a
    statement of this package): the tables are missing or not migrated. ``cli``: worded
    for the command line (run ``migrate``; Postgres's own first line only)."""
    where = f" in schema {schema!r}" if schema else ""
    migrate = f"langgraph-delta-pg migrate{f' --schema {shlex.quote(schema)}' if schema else ''}"
    if isinstance(error, SetupRequiredError) and isinstance(error.__cause__, psycopg.Error):
        error = error.__cause__  # the saver's own: word it again from Postgres's error
    if cli:
        said = error.diag.message_primary or str(error).split("\n", 1)[0]
        return SetupRequiredError(
            f"the checkpoint tables{where} are missing or not migrated: run `{migrate}` "
            f"first ({said})"
        )
    return SetupRequiredError(
        f"the checkpoint tables{where} are missing or not migrated: call the saver's "
        f"setup() once (or run `{migrate}`) before using it "
        f"({' '.join(str(error).split())})"
    )
