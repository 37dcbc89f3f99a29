#!/usr/bin/env bash
# Set up (scripts/setup.sh), then run the main job: `bppsa scan-check` on its embedded
# default chain (dense 20×20, N = 2000, batch 16, Blelloch vs sequential BP). Arguments go
# to scan-check, e.g. scripts/run.sh --n 60000 --batch 4 --json
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build/bppsa scan-check "$@"
