#!/usr/bin/env bash
# Installs mmcv 2.1.0 (compiled CPU ops) + mmsegmentation 1.2.2 + mmengine 0.10.7 for the
# seg_linear / segmenter protocols. Uses a prebuilt wheel from $MMCV_WHEEL_DIR when given,
# else builds one from the sdist (~30 min on 2 cores, cached in ~/.cache/ssl-bench/wheels).
# Options: --dry-run, --force, --no-build, --wheel-dir DIR. See scripts/install_mmcv.py.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python}" -m scripts.install_mmcv "$@"
