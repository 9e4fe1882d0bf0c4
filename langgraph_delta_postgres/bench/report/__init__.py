"""The Markdown report and the plots of a benchmark run (matplotlib, Agg backend): the
files ``--out DIR`` writes. The page's parts: :mod:`.page` (the full run's page),
:mod:`.loads`, :mod:`.agent` and :mod:`.load` (the sections'), :mod:`.plots`,
:mod:`.format` (how a figure is written)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .agent import agent_section
from .format import page_head
from .page import DETAIL, detail_markdown, markdown
from .plots import plots


def write_agent_report(res: dict[str, Any], out: Path) -> Path:
    """``--only agent --out DIR``: DIR/agent.md, the agent section alone."""
    mach = res["machine"]
    L = [
        *page_head("Benchmark: a real agent workload", res),
        f"Scale `{res['scale']}`, took {res['agent']['seconds']:.0f} s, on "
        f"{res['database']['source']} ({res['database']['scratch']}, dropped afterwards); "
        f"{mach['cpu_model']}, {mach['cpu_cores']} cores; Python {mach['python']}; Postgres "
        f"{mach['postgres'].get('server_version')}. Packages: "
        + ", ".join(f"{k} {v}" for k, v in mach["packages"].items() if v) + ".",
        "",
        *agent_section(res),
    ]
    out.mkdir(parents=True, exist_ok=True)
    path = out / "agent.md"
    path.write_text("\n".join(L).rstrip() + "\n")
    return path


def write_report(res: dict[str, Any], out: Path) -> list[Path]:
    """``bench --out DIR``: DIR/benchmarks.md (the summary), DIR/design/benchmarks-detail.md
    (the rest of the run) and DIR/img/*.png (the plots)."""
    out.mkdir(parents=True, exist_ok=True)
    from .load import plot as load_plot

    images = plots(res, out / "img") + load_plot(res, out / "img")
    md = out / "benchmarks.md"
    md.write_text(markdown(res, "img", images))
    detail = out / DETAIL
    detail.parent.mkdir(parents=True, exist_ok=True)
    detail.write_text(detail_markdown(res, "../" * DETAIL.count("/") + "img", images))
    return [md, detail, *images]


def write_load_report(res: dict[str, Any], out: Path) -> list[Path]:
    """``bench --only load --out DIR``: DIR/benchmarks-load.md and DIR/img/load.png."""
    from .load import markdown as load_markdown
    from .load import plot as load_plot

    out.mkdir(parents=True, exist_ok=True)
    images = load_plot(res, out / "img")
    mach = res["machine"]
    L = [*page_head("Benchmarks: load", res),
         f"Scale `{res['scale']}`, took {res['seconds']:.0f} s, on "
         f"{res['database']['source']} ({res['database']['scratch']}, dropped afterwards); "
         f"{mach['cpu_model']}, {mach['cpu_cores']} cores; Postgres "
         f"{mach['postgres'].get('server_version')}. Raw numbers: the JSON written by `--json`.",
         "", *load_markdown(res, "img")]
    md = out / "benchmarks-load.md"
    md.write_text("\n".join(L) + "\n")
    return [md, *images]
