"""``langgraph-delta-pg postgres``: a local Postgres from the ``embedded`` extra
(:func:`langgraph_delta_postgres._local.embedded.embedded_postgres`), its failures as
one-line CLI errors."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from .._local.embedded import EmbeddedPostgresUnavailable, embedded_postgres


@contextlib.contextmanager
def started(directory: str | os.PathLike[str] | None = None, *, fallback: str) -> Iterator[str]:
    """:func:`embedded_postgres` for the CLI: a failure to start is a one-line
    :class:`CliError` that ends with ``fallback`` (what to do instead)."""
    from ._util import CliError

    stack = contextlib.ExitStack()
    try:
        dsn = stack.enter_context(embedded_postgres(directory))
    except EmbeddedPostgresUnavailable as e:
        raise CliError(f"{e}; {fallback}", e.code) from None
    except Exception as e:
        stack.close()
        raise CliError(
            f"the embedded Postgres did not start ({' '.join(str(e).split())[:300]}); {fallback}"
        ) from None
    with stack:
        yield dsn
