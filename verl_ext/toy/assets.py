"""Build (once) and locate the tiny model, tokenizer and toy data set.

`ensure_tiny_assets()` returns paths to a directory that holds a HF-format model (random-init Qwen2, briefly
warmed up on the toy task's answer format) with its tokenizer, and train/val parquet files in verl's RLHFDataset
schema. The directory name is a hash of every build parameter, so a change of parameters never reuses a stale
copy, and concurrent builders (pytest-xdist, several Ray workers) never see a half-written directory: the build
happens in a temporary directory that is renamed into place.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

DEFAULT_CACHE = Path(os.environ.get("VERL_EXT_CACHE", Path.home() / ".cache" / "verl_ext"))


@dataclass(frozen=True)
class TinySpec:
    """Build parameters. hidden/heads give head size 32, one of vLLM's supported head sizes."""

    seed: int = 0
    vocab_size: int = 512
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 256
    max_position: int = 512
    # SFT steps on right answers (format and copy), then SFT steps with the task's off-by-one mistake mixed in
    # (verl_ext.toy.task); 0 and 0 keep the pure random init. Measured: at lr 1e-3 the copy is learned by step 100
    # (greedy 1.0); at 3e-3 it was still 0.55 at step 150, and one 300-step run ended answering a constant digit.
    warmup_steps: int = 150
    mistake_steps: int = 100
    warmup_lr: float = 1e-3
    data_version: int = 6  # bump when the toy task or its warm-up changes (part of the cache key)
    # The warm-up's per-digit correct rates (verl_ext.toy.task.WARMUP_PROFILES): "flat" (every digit mixed, the
    # demo) or "heavy_tail" (half the prompts all-wrong, a fifth all-right: where curriculum sampling should pay).
    difficulty: str = "flat"
    train_size: int = 512
    val_size: int = 100

    def key(self) -> str:
        from verl_ext.toy.tokenizer import CHAT_TEMPLATE

        params = asdict(self)
        # The chat template is saved into the model directory at build time: a cache built with another template
        # would serve stale tool rendering, so the template is part of the key.
        params["chat_template"] = hashlib.sha256(CHAT_TEMPLATE.encode()).hexdigest()[:12]
        return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class TinyAssets:
    root: Path

    @property
    def model_dir(self) -> Path:
        return self.root / "model"

    @property
    def train_file(self) -> Path:
        return self.root / "data" / "train.parquet"

    @property
    def val_file(self) -> Path:
        return self.root / "data" / "val.parquet"


def ensure_tiny_assets(spec: TinySpec | None = None, cache_dir: str | Path | None = None) -> TinyAssets:
    spec = spec or TinySpec()
    cache = Path(cache_dir) if cache_dir else DEFAULT_CACHE
    return TinyAssets(build_once(cache / f"tiny-{spec.key()}", lambda out: _build(spec, out), asdict(spec)))


def build_once(final: Path, build: Callable[[Path], None], params: dict) -> Path:
    """``final`` if it holds a finished build (its ``DONE`` file); else ``build(tmp)`` into a temporary directory
    beside it, which gets ``spec.json`` (``params``) and ``DONE`` and is renamed into place: a reader never sees a
    half-written directory, and of two concurrent builders the second's identical copy is dropped."""
    if (final / "DONE").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=final.parent))
    try:
        build(tmp)
        (tmp / "spec.json").write_text(json.dumps(params, indent=2))
        (tmp / "DONE").write_text("ok\n")
        try:
            tmp.rename(final)
        except OSError:  # another process won the race; its copy is identical
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _build(spec: TinySpec, out: Path) -> None:
    from transformers import AutoTokenizer

    from verl_ext.toy import model, task, tokenizer

    built = tokenizer.build_tokenizer(spec.vocab_size, corpus=task.tokenizer_corpus(spec.seed))
    lm = model.build_model(spec, built)
    (out / "model").mkdir()
    lm.config.save_pretrained(out / "model")
    built.save_pretrained(out / "model")
    # Warm up with the tokenizer as every consumer (verl, vLLM, the tests) loads it: transformers maps a qwen2 model
    # directory to Qwen2Tokenizer, whose pre-tokenizer splits " 3" into " ", "3" where the built one has " 3". A
    # model warmed up on the built tokenizer's ids saw unknown id sequences at run time and answered a constant.
    tok = AutoTokenizer.from_pretrained(out / "model")
    if spec.warmup_steps:
        clean = task.warmup_examples(spec.seed, mistakes=False)
        model.warm_up(lm, tok, clean, steps=spec.warmup_steps, seed=spec.seed, lr=spec.warmup_lr)
    if spec.mistake_steps:
        mixed = task.warmup_examples(spec.seed, profile=spec.difficulty)
        model.warm_up(lm, tok, mixed, steps=spec.mistake_steps, seed=spec.seed + 1, lr=spec.warmup_lr)
    lm.save_pretrained(out / "model", safe_serialization=True)
    tok.save_pretrained(out / "model")
    model.save_generation_config(out / "model", tok)
    (out / "data").mkdir()
    task.write_dataset(out / "data" / "train.parquet", spec.train_size, seed=spec.seed, split="train")
    task.write_dataset(out / "data" / "val.parquet", spec.val_size, seed=spec.seed + 1, split="val")


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description="Build the tiny CPU assets and print their directory.")
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--difficulty", default="flat", help="warm-up profile: flat or heavy_tail")
    args = p.parse_args()
    print(ensure_tiny_assets(TinySpec(seed=args.seed, difficulty=args.difficulty), args.cache_dir).root)
