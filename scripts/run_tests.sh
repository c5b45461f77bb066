#!/usr/bin/env bash
# The whole test suite (what CI runs): lint and format checks, then every test, end-to-end CPU training runs included,
# except the multi-node cluster tests (`make test-multinode`: four verl start-ups on a 2-node local cluster, ~16 min
# on 2 cores). Sets up .venv first if needed.
#
# Two phases: the unit tests on two pytest-xdist workers (single-threaded Python: one core each), then the end-to-end
# runs one after another in one process (each uses every core, and they share one Ray session: tests/conftest.py).
# Extra arguments run one pytest with them instead (a later `-m` replaces the default one), e.g.
# `make test ARGS="tests/advantage"` or `ARGS="-m e2e"`.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh || exit 1
.venv/bin/ruff check . || { echo "ruff check failed (fix, or .venv/bin/ruff check --fix .)" >&2; exit 1; }
.venv/bin/ruff format --check . || { echo "ruff format: files not formatted (.venv/bin/ruff format .)" >&2; exit 1; }
pytest=(.venv/bin/python -m pytest -q -ra --durations=20)
if [ $# -gt 0 ]; then
  "${pytest[@]}" -m "not multinode" "$@"
  rc=$?
else
  echo "[tests] unit tests on 2 workers"
  "${pytest[@]}" -n 2 --dist worksteal -m "not e2e and not multinode"
  unit=$?
  echo "[tests] end-to-end runs"
  # collected from the test_e2e_*.py files only (every e2e test lives in one: tests/test_suite_phases.py), ~7 s less
  # than importing the whole suite to deselect it; the marker still selects
  mapfile -t e2e_files < <(find tests -name 'test_e2e_*.py' | sort)
  "${pytest[@]}" -m "e2e and not multinode" "${e2e_files[@]}"
  rc=$?
  [ $unit -ne 0 ] && rc=$unit
fi
# a green multi-node run (make test-multinode: `-m multinode tests/launch`, nothing deselected by -k) stamps the code
# it ran on; `make test` checks the stamp (tests/launch/multinode_stamp.py)
if [ $rc -eq 0 ] && [ "$*" = "-m multinode tests/launch" ]; then
  .venv/bin/python -m tests.launch.multinode_stamp write
fi
if [ $rc -eq 5 ]; then
  echo "pytest collected no tests: the suite or the selection is broken" >&2
fi
exit $rc
