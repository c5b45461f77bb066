#!/usr/bin/env bash
# The whole test suite, end-to-end CPU training runs included. Sets up .venv first if needed.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh || exit 1
.venv/bin/python -m pytest -q -ra --durations=15 "$@"
rc=$?
if [ $rc -eq 5 ]; then
  echo "pytest collected no tests: the suite or the selection is broken" >&2
fi
exit $rc
