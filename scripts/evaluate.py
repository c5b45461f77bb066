"""Score models on a task's large held-out set through the run's own generation path: what a campaign reads to decide.

    .venv/bin/python scripts/evaluate.py released trained=outputs/campaign/X/run_s0/global_step_16/actor \\
        [--recipe fast_dapo] [--preset real_cpu] [--out-root outputs/evaluate] [-- more overrides]

Each model is `released` (SmolLM2-135M-Instruct as released), or NAME=DIR with DIR a Hugging Face directory or a
verl actor checkpoint (exported to float32 first: verl_ext/pretrained/export.py). For each, the recipe's driver runs
with the preset and `trainer.val_only=true`, the model path pointing at it: the actor and the rollout server start as
in training, the small validation set and the large held-out set (`trainer.heldout`, the preset's:
`${mathgen:heldout,<mix>}`, 1,024 questions that share no meaning with the training or validation ones) are
answered greedily by the rollout server (vLLM) and graded by the run's reward, exactly as a run's first and last
evaluations are. Prints per model the held-out accuracy with its binomial standard error, the evaluation's seconds
and seconds per 1,024 questions (the start-up apart), and where its answers are (`<run>/validation/heldout/0.jsonl`).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from verl_ext.launch.local_run import run_recipe
from verl_ext.metrics_log.console import val_accuracy
from verl_ext.pretrained.export import ExportError, model_directory
from verl_ext.trainer.heldout import PREFIX


def say(line: str) -> None:
    print(f"[evaluate] {line}", flush=True)


def evaluate(name: str, model: Path, args, extra: list[str]) -> dict:
    run_dir = args.out_root / name
    overrides = [
        f"+preset={args.preset}",
        "trainer.val_only=true",
        f"actor_rollout_ref.model.path={model}",
        f"trainer.experiment_name=evaluate_{name}",
        *extra,
    ]
    say(f"{name}: {model} (console: {run_dir}/console.log)")
    t0 = time.monotonic()
    rows = run_recipe(f"recipe.{args.recipe}.main", overrides, run_dir, run_dir / "console.log")
    wall = time.monotonic() - t0
    row = rows[-1]
    acc, n = val_accuracy(row, prefix=PREFIX), int(row.get(f"{PREFIX}/questions", 0))
    if acc is None or not n:
        raise SystemExit(f"[evaluate] {name}: the run logged no held-out accuracy (is trainer.heldout.files set?)")
    seconds = float(row[f"{PREFIX}/seconds"])
    return dict(name=name, n=n, acc=acc, se=math.sqrt(acc * (1 - acc) / n), s=seconds, per1024=seconds * 1024 / n,
                wall=wall, val=val_accuracy(row), answers=run_dir / "validation" / PREFIX)  # fmt: skip


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+", help="`released` or NAME=DIR (a Hugging Face directory or a verl actor)")
    p.add_argument("--recipe", default="fast_dapo", help="the recipe whose driver evaluates (recipe/<name>/main.py)")
    p.add_argument("--preset", default="real_cpu", help="its preset: the task, the held-out set, the backend")
    p.add_argument("--out-root", type=Path, default=Path("outputs/evaluate"))
    args = p.parse_args(argv)
    results = []
    for spec in args.models:
        try:
            name, model = model_directory(spec, args.out_root / "exported", log=say)
        except ExportError as e:
            raise SystemExit(f"[evaluate] {e}") from None
        results.append(evaluate(name, model, args, extra))
    say("model | held-out questions | accuracy +- s.e. | small validation set | evaluation s | s per 1,024 | run s")
    for r in results:
        val = "-" if r["val"] is None else f"{r['val']:.3f}"
        say(f"{r['name']} | {r['n']} | {r['acc']:.3f} +- {r['se']:.3f} | {val} | {r['s']:.0f} | {r['per1024']:.0f} | "
            f"{r['wall']:.0f}")  # fmt: skip
        say(f"  answers: {r['answers']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
