"""The load section's constants and scales (how many sessions, turns, repetitions)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

HISTORY_EVERY = 10
PAGE = 10
POOL_CAP = 32
#: Client processes at most per run: the sessions (and the pool's connections) are split
#: among them, so one saturated Python process does not leave the server waiting to send
#: (``ClientWrite``) inside both savers' statements. 1: every session in this process.
CLIENT_PROCS = 4
WARM_TURNS = 6  # per pool connection, before the clock starts (> the prepare threshold)
#: Untimed turns of every session on its own thread before the clock starts: the process
#: has served the conversation before, as a running server has (a saver's first read of
#: a thread, a fixed cost per session, would otherwise weigh 100 turns at 1 session and
#: 6 at 64; the cold read is the loads section's subject).
SESSION_WARM_TURNS = 1
MODES = ("asyncio", "threads")
SAVERS = ("ours", "official")


@dataclass(frozen=True)
class LoadScale:
    sessions: tuple[int, ...]
    turns: dict[int, int]  # sessions -> turns per session
    reps: int
    prior: int  # turns already on every session's thread (the fewest: see stagger)
    workload: str = "coding_a"
    meter_turns: int = 10
    client_procs: int = CLIENT_PROCS
    #: Session i starts on a thread holding prior + stagger[i % len(stagger)] turns. A
    #: DeltaChannel writes its _DeltaSnapshot every 100 updates (about 30 coding_a
    #: turns); had every session started on copies of one thread, every session would
    #: write one in the same turn of its run (a fixed cost per session, spread over a
    #: run's 100 turns at 1 session but over 6 at 64). Starting points
    #: spread over one such cycle put the snapshots where a real thread has them.
    stagger: tuple[int, ...] = (0,)


SCALES = {
    # at least 100 turns per run: the p99 of fewer is the run's single slowest turn (one
    # garbage collection or one snapshot write decides it); of 100, the second slowest
    "full": LoadScale((1, 4, 16, 64), {1: 100, 4: 25, 16: 10, 64: 6}, reps=2, prior=30,
                      stagger=(0, 5, 10, 15, 20, 25)),
    "quick": LoadScale((1, 4, 16), {1: 20, 4: 10, 16: 5}, reps=2, prior=20,
                       stagger=(0, 10, 20)),
    "tiny": LoadScale((1, 4), {1: 4, 4: 3}, reps=1, prior=5, meter_turns=3, client_procs=2,
                      stagger=(0, 2)),
}


def _cfg(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def _pages_at(session: int, turn: int) -> bool:
    """Whether ``session`` asks for a history page after its ``turn``-th turn (staggered:
    one turn in HISTORY_EVERY, not all sessions at once)."""
    return (turn + session) % HISTORY_EVERY == HISTORY_EVERY - 1
