"""Two-phase curriculum sampling ("fast DAPO", SPEED-RL arXiv 2506.09016): pure bookkeeping, no Ray.

- ``dataproto_ops``: ``truncate``, ``interleave_by_uid``, ``pad_to_multiple`` for verl's DataProto.
- ``controller``: ``DataController`` (fast / dapo / plain modes).
- ``cost_model``: expected responses per training group from a pass-rate histogram.
"""

from verl_ext.curriculum.controller import CONTINUE, PHASE_KEY, SCREEN, DataController
from verl_ext.curriculum.dataproto_ops import PAD_KEY, install, interleave_by_uid, pad_to_multiple, truncate


def register() -> None:
    """Make ``DataProto.truncate`` / ``DataProto.interleave_by_uid`` available where verl lacks them (idempotent)."""
    install()


__all__ = [
    "CONTINUE",
    "PAD_KEY",
    "PHASE_KEY",
    "SCREEN",
    "DataController",
    "interleave_by_uid",
    "pad_to_multiple",
    "register",
    "truncate",
]
