"""How the report writes a figure: timings, ratios, sizes, saver names, targets met."""

from __future__ import annotations

import math
from typing import Any

LABELS = {
    "ours": "ours (DeltaChannel)",
    "official": "official 3.2 (DeltaChannel)",
    "ours_full": "ours, full-snapshot fields",
    "inmemory": "InMemorySaver",
}


def _ms(s: dict[str, Any]) -> str:
    if not s or s.get("n", 0) == 0 or math.isnan(s["median_ms"]):
        return "n/a"
    return f"{s['median_ms']:.2f} ({s['min_ms']:.2f}-{s['max_ms']:.2f})"


def _x(r: dict[str, Any]) -> str:
    if not r or r.get("n", 0) == 0:
        return "n/a"
    return f"{r['median']:.2f}x ({r['min']:.2f}-{r['max']:.2f})"


def _mb(b: int | None) -> str:
    return "n/a" if b is None else f"{b / 1e6:.2f}"


def _saver_name(key: str, spec: dict[str, Any]) -> str:
    base = str(LABELS.get(spec["label"], spec["label"]))
    if spec["delta"] and spec["kind"] != "inmemory":
        f = spec["freq"]
        return f"{base}, snapshot_frequency={'default (100)' if f is None else f}"
    return base



def _met(value: float, want: float | None) -> str:
    if want is None:
        return "-"
    return f">= {want}x: {'yes' if value >= want else 'no'}"


def page_head(title: str, res: dict[str, Any]) -> list[str]:
    """The top of every page the report writes: its title and the command whose one run
    produced every figure on it."""
    return [f"# {title}", "", "Every figure on this page was produced by one run of:", "",
            "```sh", res["command"], "```", ""]
