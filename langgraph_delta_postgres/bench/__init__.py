"""``langgraph-delta-pg bench``: the benchmark against the official saver (:mod:`.main`),
its sections and its workloads. Not imported by the library; see docs/benchmarks.md."""
