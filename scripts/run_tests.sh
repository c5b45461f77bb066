#!/usr/bin/env bash
# The whole test suite (what CI runs): lint and format checks, then every test, end-to-end CPU training runs included,
# except the multi-node cluster tests (`make test-multinode`: four verl start-ups on a 2-node local cluster, ~16 min
# on 2 cores). Sets up .venv first if needed. Extra arguments go to pytest (a later `-m` replaces the default one).
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh || exit 1
.venv/bin/ruff check . || { echo "ruff check failed (fix, or .venv/bin/ruff check --fix .)" >&2; exit 1; }
.venv/bin/ruff format --check . || { echo "ruff format: files not formatted (.venv/bin/ruff format .)" >&2; exit 1; }
.venv/bin/python -m pytest -q -ra --durations=20 -m "not multinode" "$@"
rc=$?
if [ $rc -eq 5 ]; then
  echo "pytest collected no tests: the suite or the selection is broken" >&2
fi
exit $rc
