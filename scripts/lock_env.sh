#!/usr/bin/env bash
# Rewrite constraints-cpu.txt from the working .venv: run after a deliberate upgrade (e.g. `pip install -U X` inside
# .venv) once `make test` passes on it. The header and the torch pin stay; everything else is `pip freeze`.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
{
  sed -n '/^torch==/q;p' constraints-cpu.txt
  grep -E '^torch==' constraints-cpu.txt
  "$VENV/bin/python" -m pip freeze --exclude-editable --disable-pip-version-check | grep -v -E '^(torch|verl-ext)=='
} > constraints-cpu.txt.new
mv constraints-cpu.txt.new constraints-cpu.txt
echo "constraints-cpu.txt: $(grep -c '==' constraints-cpu.txt) pins"
