"""Two-phase curriculum sampling ("fast DAPO", SPEED-RL arXiv 2506.09016): pure bookkeeping, no Ray.

- ``controller``: ``DataController`` (fast / dapo / plain modes).
- ``dataproto_ops``: ``pad_to_multiple`` (equal chunks for verl's agent-loop workers).
- ``cost_model``: expected responses per training group from a pass-rate histogram.

Nothing here patches verl: the recipe calls these functions directly.
"""

from verl_ext.curriculum.controller import CONTINUE, PHASE_KEY, SCREEN, DataController
from verl_ext.curriculum.dataproto_ops import PAD_KEY, pad_to_multiple

__all__ = ["CONTINUE", "PAD_KEY", "PHASE_KEY", "SCREEN", "DataController", "pad_to_multiple"]
