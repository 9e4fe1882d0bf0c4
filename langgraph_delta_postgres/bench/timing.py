"""The benchmark's timing harness: one timed call (:func:`timed`), the summaries of
repeated ones (:func:`summary`, :func:`ratio_summary`) and interleaved rounds of several
callables with ratios taken round by round (:class:`Interleaved`), threads run for a
while (:func:`run_threads`). The bench's sections and the scripts in ``scripts/`` time
through it."""

from __future__ import annotations

import gc
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


def timed(fn: Callable[[], Any]) -> float:
    """Seconds one call of ``fn`` took."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def summary(xs: Sequence[float]) -> dict[str, float]:
    """Median / min / max / n of ``xs`` (seconds in, milliseconds out)."""
    if not xs:
        return {"median_ms": float("nan"), "min_ms": float("nan"), "max_ms": float("nan"), "n": 0}
    return {
        "median_ms": statistics.median(xs) * 1000,
        "min_ms": min(xs) * 1000,
        "max_ms": max(xs) * 1000,
        "n": len(xs),
    }


def ratio_summary(xs: Sequence[float]) -> dict[str, float]:
    if not xs:
        return {"median": float("nan"), "min": float("nan"), "max": float("nan"), "n": 0}
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def run_threads(
    threads: Sequence[threading.Thread], seconds: float, stop: threading.Event
) -> float:
    """Start ``threads``, let them run for ``seconds``, then set ``stop`` (their signal
    to end) and join them all; the seconds from the first start to the last join."""
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


@dataclass
class Interleaved:
    """Repeated, interleaved timing of several named callables.

    Each round runs every callable once, in an order that rotates round by round,
    so drift of the machine spreads evenly; ratios are computed round by round.

    Every timed call starts right after ``gc.collect()``. A full collection costs in
    proportion to everything the process holds and comes due after enough objects have
    survived, whoever made them: without the reset, one call paid for the garbage of the
    calls before it, and a whole round's ratio turned on which side the collection landed
    in (measured on the resume loop: one full collection cost 300 ms, the whole of our
    loop). Collections a call triggers by itself are counted in its time.

    What the process held when ``run`` began (modules, savers, earlier results) is moved
    out of the collector's reach for the run (``gc.freeze``) and given back at its end:
    a full collection of that heap cost 0.3 s on a loaded 2-core machine, 212 s of a
    279 s ``--scale tiny`` run (cProfile), and it is the same for every side. Servers
    that fork workers after loading do the same (``gc.freeze`` in gunicorn's and uWSGI's
    guidance)."""

    samples: dict[str, list[float]] = field(default_factory=dict)

    def run(self, fns: dict[str, Any], rounds: int, *, warmup: int = 1,
            reported: bool = False, freeze: bool = True) -> None:
        """``fns``: name -> a callable, or a ``(prepare, call)`` pair where only
        ``call(prepare())`` is timed, or a ``(prepare, call, finish)`` triple where
        ``finish(arg)`` runs (untimed) after the call, e.g. to close what ``prepare``
        opened. ``reported``: the call times itself (e.g. in a worker process, with
        :func:`timed`) and returns its seconds, which are the sample instead of the
        time the call took here. ``freeze=False``: the process's heap stays in the
        collector's reach (for a measurement of what the collections cost).

        Two callables alternate (A B, B A, ...); three or more rotate, every other
        round in reverse."""
        names = list(fns)

        def once(name: str) -> float:
            f = fns[name]
            if isinstance(f, tuple):
                prepare, call, *finish = f
                arg = prepare()
                try:
                    gc.collect()
                    return measure(lambda: call(arg))
                finally:
                    for fin in finish:
                        fin(arg)
            gc.collect()
            return measure(f)

        def measure(fn: Callable[[], Any]) -> float:
            if reported:
                return float(fn())
            return timed(fn)

        gc.collect()
        if freeze:
            gc.freeze()
        try:
            for name in names:
                for _ in range(warmup):
                    once(name)
                self.samples.setdefault(name, [])
            for r in range(rounds):
                order = names[r % len(names) :] + names[: r % len(names)]
                if r % 2 and len(names) > 2:  # for two, the rotation alone alternates
                    order.reverse()
                for name in order:
                    self.samples[name].append(once(name))
        finally:
            if freeze:
                gc.unfreeze()

    def stats(self, name: str) -> dict[str, float]:
        return summary(self.samples.get(name, []))

    def ratio(self, a: str, b: str) -> dict[str, float]:
        xs, ys = self.samples.get(a, []), self.samples.get(b, [])
        return ratio_summary([x / y for x, y in zip(xs, ys, strict=False) if y > 0])
