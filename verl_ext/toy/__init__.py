"""Tiny, locally built assets for CPU runs and tests: a BPE tokenizer, a random-init Qwen2 model, a toy task.

Nothing here downloads anything. Everything is deterministic from a seed, and cached on disk under a directory
keyed by the build parameters, so tests and demos share one copy.
"""

from verl_ext.toy.assets import TinyAssets, ensure_tiny_assets

__all__ = ["TinyAssets", "ensure_tiny_assets"]
