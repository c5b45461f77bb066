#!/usr/bin/env bash
# SPEED-RL arm "fast": SPEED (two-phase screening, 4 + 20 responses) on RLOO.
#   bash scripts/speedrl/fast.sh [1p5b|7b] [hydra overrides...]     (default model: 1p5b)
set -euo pipefail
MODEL=${1:-1p5b}
shift $(($# > 0 ? 1 : 0))
exec bash "$(dirname "$0")/run.sh" fast "$MODEL" "$@"
