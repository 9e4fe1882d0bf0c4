"""The scales of the full run (``--scale full | quick | tiny``; ``--quick`` is ``quick``)
and the network round trips its history and resume figures are taken at."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RTTS = {"0": 0.0, "0.5": 0.5, "2": 2.0}

@dataclass(frozen=True)
class Scale:
    name: str
    messages_points: tuple[int, ...]
    messages_freqs: tuple[int | None, ...]
    coding_a_points: tuple[int, ...]
    coding_b_points: tuple[int, ...]
    resume_rounds: int
    micro: Any  # MicroScale
    rtts: tuple[str, ...]


def scales() -> dict[str, Scale]:
    from .micro import MicroScale

    return {
        "full": Scale(
            "full",
            messages_points=(10, 100, 250, 500),
            messages_freqs=(1, 5, 10, 50, None),
            coding_a_points=(10, 50, 100, 200),
            coding_b_points=(10, 50, 100),
            resume_rounds=7,
            micro=MicroScale(
                depths=(10, 100, 1000, 5000), channel_depth=1000, fork_main=500, forks=100,
                fork_len=10, other_threads=10_000, headline_a_turns=200, headline_a_freq=50,
                headline_b_turns=1000, headline_b_freq=1000, rounds=11, deep_rounds=5,
            ),
            rtts=("0", "0.5", "2"),
        ),
        "quick": Scale(
            "quick",
            messages_points=(10, 50),
            messages_freqs=(10, None),
            coding_a_points=(10, 20),
            coding_b_points=(5,),
            resume_rounds=3,
            micro=MicroScale(
                depths=(10, 200), channel_depth=100, fork_main=100, forks=10, fork_len=5,
                other_threads=500, headline_a_turns=30, headline_a_freq=50,
                headline_b_turns=60, headline_b_freq=1000, rounds=5, deep_rounds=3,
            ),
            rtts=("0", "0.5", "2"),
        ),
        # for the test suite: the quick path, smaller
        "tiny": Scale(
            "tiny",
            messages_points=(5, 10),
            messages_freqs=(None,),
            coding_a_points=(5,),
            coding_b_points=(),
            resume_rounds=2,
            micro=MicroScale(
                depths=(10, 50), channel_depth=20, fork_main=30, forks=3, fork_len=3,
                other_threads=50, headline_a_turns=8, headline_a_freq=50,
                headline_b_turns=10, headline_b_freq=1000, rounds=2, deep_rounds=2,
            ),
            rtts=("0", "2"),
        ),
    }
