"""Read tokens and LSNs: what :meth:`RoutingSaver.token` gives and ``read_after`` (or
``configurable["lgdp_read_after"]``) takes, a floor every read of the context must reach
(docs/replicas.md)."""

from __future__ import annotations

from contextvars import ContextVar

#: The ``configurable`` key a caller may put a token under (see :meth:`RoutingSaver.token`).
READ_AFTER_KEY = "lgdp_read_after"
TOKEN_PREFIX = "lgdp-lsn:"


def lsn_to_int(lsn: str) -> int:
    """``'16/B374D848'`` -> an int that orders like the LSN."""
    hi, lo = lsn.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def int_to_lsn(n: int) -> str:
    return f"{n >> 32:X}/{n & 0xFFFFFFFF:X}"


def parse_token(token: str) -> int:
    """The LSN of a token from :meth:`RoutingSaver.token` (ValueError if it is not one)."""
    if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX):
        raise ValueError(f"not a read token of this package: {token!r}")
    try:
        return lsn_to_int(token[len(TOKEN_PREFIX):])
    except ValueError:
        raise ValueError(f"not a read token of this package: {token!r}") from None


def make_token(lsn: int) -> str:
    return TOKEN_PREFIX + int_to_lsn(lsn)


#: Tokens given with read_after() in this context (the highest LSN).
_TOKEN: ContextVar[int | None] = ContextVar("lgdp_read_after", default=None)
