from __future__ import annotations

from .cli import main

if __name__ == "__main__":  # not again in a process that multiprocessing spawns
    raise SystemExit(main())
