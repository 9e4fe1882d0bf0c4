#!/usr/bin/env bash
# Freeze a landed version of the package for tests/graph/test_deployment_shape.py (the
# previous release's worker of a rolling upgrade): the package (without bench/ and cli/,
# which the worker does not use), sql/ and migrations/ at commit REV, as
# tests/data/release-REV.tar.gz. Reproducible (gzip -n: no name, no time stamp).
# Usage: scripts/freeze_release.sh REV   (then set RELEASE in the test to REV)
set -euo pipefail
cd "$(dirname "$0")/.."
rev="$(git rev-parse --short "${1:?usage: $0 REV}")"
git archive --prefix=release/ "$rev" langgraph_delta_postgres sql migrations \
  ':(exclude)langgraph_delta_postgres/bench' ':(exclude)langgraph_delta_postgres/cli' \
  | gzip -9n > "tests/data/release-$rev.tar.gz"
echo "tests/data/release-$rev.tar.gz"
