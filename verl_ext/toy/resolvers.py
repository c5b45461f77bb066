"""OmegaConf resolvers so configs can point at the tiny assets without knowing the cache path:
`${tiny_assets:model}`, `${tiny_assets:train}`, `${tiny_assets:val}` (built on first use), `${tiny_assets:baseline}`
(the constant-answer accuracy on the validation set, a float); a second argument picks the warm-up's difficulty
profile: `${tiny_assets:model,heavy_tail}` (default flat)."""

from __future__ import annotations

from omegaconf import OmegaConf


def _tiny_assets(what: str, difficulty: str = "flat") -> str | float:
    from verl_ext.toy.assets import TinySpec, ensure_tiny_assets
    from verl_ext.toy.task import WARMUP_PROFILES

    if difficulty not in WARMUP_PROFILES:
        raise ValueError(f"${{tiny_assets:{what},{difficulty}}}: difficulty is one of {sorted(WARMUP_PROFILES)}")
    a = ensure_tiny_assets(TinySpec(difficulty=difficulty))
    paths = {"model": a.model_dir, "train": a.train_file, "val": a.val_file, "root": a.root}
    if what == "baseline":
        from verl_ext.toy.task import constant_answer_baseline

        return constant_answer_baseline(a.val_file)[1]
    if what not in paths:
        raise ValueError(f"${{tiny_assets:{what}}}: choose one of {sorted(paths) + ['baseline']}")
    return str(paths[what])


def register_resolvers() -> None:
    if not OmegaConf.has_resolver("tiny_assets"):
        OmegaConf.register_new_resolver("tiny_assets", _tiny_assets)
