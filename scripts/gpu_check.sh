#!/usr/bin/env bash
# The GPU check (scripts/gpu_check.py): installs the harness when this Python lacks it, then runs.
set -euo pipefail
cd "$(dirname "$0")/.."
(cd / && python -c "import harness.training.engine") 2>/dev/null || pip install -q -e .
exec python scripts/gpu_check.py "$@"
