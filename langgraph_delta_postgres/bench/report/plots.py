"""The plots of the workload sections (storage and resume latency by turns)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .format import _saver_name


def plots(res: dict[str, Any], img: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    img.mkdir(parents=True, exist_ok=True)
    out = []
    for wl, w in res.get("workloads", {}).items():
        turns = [p["turns"] for p in w["points"]]
        if len(turns) < 2:
            continue
        for what in ("storage", "resume"):
            fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=110)
            for key, spec in w["savers"].items():
                if what == "storage":
                    if spec["kind"] == "inmemory":
                        continue
                    ys = [p["savers"][key].get("storage_bytes", 0) / 1e6 for p in w["points"]]
                else:
                    ys = [p["resume"]["0"].get(key, {}).get("median_ms", float("nan"))
                          for p in w["points"]]
                style = "--" if spec["label"] == "official" else "-"
                if spec["label"] == "ours_full":
                    style = ":"
                ax.plot(turns, ys, style, marker="o", label=_saver_name(key, spec))
            ax.set_xlabel("user turns")
            if what == "storage":
                ax.set_yscale("log")
                ax.set_ylabel("checkpoint storage, MB (log scale)")
                ax.set_title(f"{wl}: bytes on disk (3 tables, TOAST + indexes)")
            else:
                ax.set_ylabel("get_state on resume, ms (median, 0 ms RTT)")
                ax.set_title(f"{wl}: resume latency (new graph, get_state)")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
            fig.tight_layout()
            path = img / f"{wl}_{what}.png"
            fig.savefig(path)
            plt.close(fig)
            out.append(path)
    return out
