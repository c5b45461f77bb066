"""OmegaConf resolvers so configs can point at the tiny assets without knowing the cache path:
`${tiny_assets:model}`, `${tiny_assets:train}`, `${tiny_assets:val}` (built on first use)."""

from __future__ import annotations

from omegaconf import OmegaConf


def _tiny_assets(what: str) -> str:
    from verl_ext.toy import ensure_tiny_assets

    a = ensure_tiny_assets()
    paths = {"model": a.model_dir, "train": a.train_file, "val": a.val_file, "root": a.root}
    if what not in paths:
        raise ValueError(f"${{tiny_assets:{what}}}: choose one of {sorted(paths)}")
    return str(paths[what])


def register_resolvers() -> None:
    if not OmegaConf.has_resolver("tiny_assets"):
        OmegaConf.register_new_resolver("tiny_assets", _tiny_assets)
