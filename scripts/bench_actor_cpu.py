"""Benchmark: verl's actor passes on the CPU backend: shared-prefix against unshared, and against plain torch.

`--shared-prefix` (the comparison for docs/REAL_MODEL.md "Where the actor's time goes"): runs fast DAPO on the real
model twice in one sitting, `actor.use_prefix_grouper=false` then `=true`, with the same overrides, and prints each
run's per-step timers (generation, old log-probs, actor update, step) and the medians' ratios; then replays the first
run's training rows through verl's engine step (`forward_step`, the project's two seams included) in this process,
unshared and shared, in the run's micro-batches (update: forward + backward; log-probs: no-grad forward), so the
two settings are also timed on identical rows. Targets (issue: shared-prefix passes), each printed beside its figure
with PASS or MISS: update + old log-probs >= 2.5x faster (both runs' medians, and the same rows), a step end to end
<= 0.5x.

Without `--shared-prefix`: verl's actor passes against plain torch on the same rows, as a ratio (no target).

Runs fast DAPO on the real model (`+preset=real_cpu`: SmolLM2-135M-Instruct, vLLM-CPU rollout, FSDP2 actor) for a
few steps with the rollouts dumped, then replays each step's training rows (prompt + response tokens, the run's
micro-batch size) through plain torch in this process: forward + backward + AdamW step (what `update_actor` does)
and a no-grad forward with log-softmax gather (what `old_log_prob` does). Both sides run fp32 on every core, one
after the other on the same machine. Printed per step: seconds, ms per token, and verl / torch.

Usage: .venv/bin/python scripts/bench_actor_cpu.py [--shared-prefix] [--steps 2] [--out outputs/bench_actor_cpu]
           [-- overrides...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from benchlib import Target

from verl_ext.launch.artifacts import METRICS_FILE
from verl_ext.launch.local_run import run_recipe
from verl_ext.metrics_log import read_jsonl

ENTRY = "recipe.fast_dapo.main"


def run_verl(out: Path, steps: int, overrides: list[str], reuse: bool = False) -> list[dict]:
    """Fast DAPO on the real model for `steps` steps, its rollouts dumped under `out`; its metric rows (`reuse`: an
    earlier run's, read from `out`)."""
    run_dir = out / "run"
    if reuse:
        return read_jsonl(run_dir / METRICS_FILE)
    overrides = [
        "+preset=real_cpu",
        f"trainer.total_training_steps={steps}",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.save_freq=-1",
        "trainer.plot_keys=[]",
        f"trainer.rollout_data_dir={out / 'rollouts'}",
        *overrides,
    ]
    print(f"[bench] verl: {ENTRY} {' '.join(overrides)}", flush=True)
    return run_recipe(ENTRY, overrides, run_dir, out / "run.log")


def step_rows(out: Path, step: int, tok) -> list[tuple[list[int], int]]:
    """(token ids, prompt length) of every training row of a step, from verl's rollout dump."""
    rows = []
    for line in open(out / "rollouts" / f"{step}.jsonl"):
        d = json.loads(line)
        prompt = tok(d["input"], add_special_tokens=False)["input_ids"]
        response = tok(d["output"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        rows.append((prompt + response, len(prompt)))
    return rows


def _micro_batches(rows, size: int):
    import torch

    for i in range(0, len(rows), size):
        chunk = rows[i : i + size]
        width = max(len(ids) for ids, _ in chunk)
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        mask = torch.zeros(len(chunk), width, dtype=torch.long)
        target = torch.zeros(len(chunk), width - 1, dtype=torch.bool)  # response positions
        for j, (row, plen) in enumerate(chunk):
            ids[j, : len(row)] = torch.tensor(row)
            mask[j, : len(row)] = 1
            target[j, plen - 1 : len(row) - 1] = True
        yield ids, mask, target


def _log_probs(model, ids, mask):
    import torch

    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def torch_update(model, opt, rows, micro: int) -> float:
    start = time.perf_counter()
    opt.zero_grad()
    for ids, mask, target in _micro_batches(rows, micro):
        lp = _log_probs(model, ids, mask)
        (-(lp * target).sum() / max(1, int(target.sum()))).backward()
    opt.step()
    return time.perf_counter() - start


def torch_log_probs(model, rows, micro: int) -> float:
    import torch

    start = time.perf_counter()
    with torch.no_grad():
        for ids, mask, _ in _micro_batches(rows, micro):
            _log_probs(model, ids, mask)
    return time.perf_counter() - start


TIMERS = ("timing_s/gen", "timing_s/old_log_prob", "timing_s/update_actor", "step_wall_s")
TARGET_ACTOR = Target(">=", 2.5, "x")  # update_actor + old_log_prob, unshared / shared (also on the same rows)
TARGET_STEP = Target("<=", 0.5)  # a step end to end, shared / unshared


def _with_step_wall(rows: list[dict]) -> list[dict]:
    """Each row with `step_wall_s`: the training clock's seconds for that step, generation calls included (verl's
    `timing_s/step` leaves out the recipe's generation calls)."""
    out, before = [], 0.0
    for r in rows:
        total = r["time/train_total_s"]
        out.append({**r, "step_wall_s": total - before})
        before = total
    return out


def _median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows if r.get(key) is not None)


def replay_engine(rows, micro_update: int, micro_lp: int, pad_id: int, temperature: float, model) -> dict:
    """Seconds for verl's engine step on these rows ((token ids, prompt length) each), unshared and shared: update
    (forward + backward per micro-batch) and log-probs (no-grad forward per micro-batch)."""
    import torch

    from verl_ext.shared_prefix.rows import bare_engine, engine_batch

    engine = bare_engine(model)

    def loss_fn(model_output, data, dp_group=None):
        lp = model_output["log_probs"].values()
        return -lp.sum() / lp.numel(), {}

    # each setting in the order the trainer hands it: unshared rows as verl's balance sorts them (the dump's order),
    # shared rows with each prompt's rows together (verl's balance keeps uids together with use_prefix_grouper)
    first = {}
    for ids, plen in rows:
        first.setdefault(tuple(ids[:plen]), len(first))
    grouped = sorted(rows, key=lambda r: first[tuple(r[0][: r[1]])])

    def timed(shared: bool, micro: int, train: bool) -> float:
        ordered = grouped if shared else rows
        start = time.perf_counter()
        for i in range(0, len(ordered), micro):
            chunk = ordered[i : i + micro]
            td = engine_batch(
                [r[:p] for r, p in chunk],
                [r[p:] for r, p in chunk],
                pad_id,
                temperature,
                shared_prefix=shared,
                calculate_entropy=True,
            )
            if train:
                loss, _ = engine.forward_step(td, loss_fn, forward_only=False)
                loss.backward()
            else:
                with torch.no_grad():
                    engine.forward_step(td, None, forward_only=True)
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    return {
        (shared, what): timed(shared, micro, what == "update")
        for shared in (False, True)
        for what, micro in (("update", micro_update), ("log_prob", micro_lp))
    }


def real_model():
    """SmolLM2-135M-Instruct's tokenizer and fp32 model (eager attention), torch on every core."""
    os.environ.setdefault("VERL_PLATFORM", "cpu")  # verl's engine step asks the platform for its device
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl_ext.cpu.shims import use_all_cores
    from verl_ext.pretrained.smollm2 import ensure_smollm2

    use_all_cores()
    path = ensure_smollm2()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    return AutoTokenizer.from_pretrained(path), model


def run_both_settings(args) -> dict[bool, list[dict]]:
    """{shared: the run's metric rows with each step's wall time}, use_prefix_grouper false then true."""
    runs = {}
    for shared in (False, True):
        flag = f"actor_rollout_ref.actor.use_prefix_grouper={str(shared).lower()}"
        sub = Path(args.out) / ("shared" if shared else "unshared")
        runs[shared] = _with_step_wall(run_verl(sub, args.steps, [*args.overrides, flag], reuse=args.reuse))
    return runs


def print_run_timers(runs: dict[bool, list[dict]], steps: int) -> None:
    """Each run's per-step timers, their medians, and the two ratios against their targets."""
    print(f"{'setting':>9} {'step':>4} " + " ".join(f"{k.split('/')[-1]:>13}" for k in TIMERS))
    for shared, rows in runs.items():
        for r in rows:
            cells = " ".join(f"{r.get(k, float('nan')):>13.1f}" for k in TIMERS)
            print(f"{'shared' if shared else 'unshared':>9} {r['step']:>4} {cells}")
    med = {(s, k): _median(rows, k) for s, rows in runs.items() for k in TIMERS}
    actor = {s: med[(s, "timing_s/old_log_prob")] + med[(s, "timing_s/update_actor")] for s in runs}
    print(
        f"[bench] medians over {steps} steps (s): "
        + "; ".join(f"{k.split('/')[-1]} {med[(False, k)]:.1f} -> {med[(True, k)]:.1f}" for k in TIMERS)
    )
    speedup = actor[False] / actor[True]
    print(
        f"[bench] update_actor + old_log_prob: {actor[False]:.1f} s -> {actor[True]:.1f} s = "
        f"{speedup:.2f}x faster {TARGET_ACTOR.verdict(speedup)}"
    )
    step = med[(True, "step_wall_s")] / med[(False, "step_wall_s")]
    print(f"[bench] step end to end: shared / unshared = {step:.2f} {TARGET_STEP.verdict(step)}")


def replay_same_rows(args, metrics: list[dict]) -> None:
    """The unshared run's rows of every step through verl's engine step both ways, and the median speed-up."""
    tok, model = real_model()
    sub = Path(args.out) / "unshared"
    print(
        f"[bench] same rows through verl's engine step (micro-batches {args.micro_update} update, {args.micro_lp} "
        f"log-probs), rows of the unshared run:"
    )
    print(
        f"{'step':>4} {'rows':>5} {'tokens':>7} | {'upd unshared':>12} {'shared':>7} {'x':>5} | {'lp unshared':>11} "
        f"{'shared':>7} {'x':>5}"
    )
    ratios = []
    for m in metrics:
        rows = step_rows(sub, m["step"], tok)
        t = replay_engine(rows, args.micro_update, args.micro_lp, tok.pad_token_id, args.temperature, model)
        u0, u1, l0, l1 = t[(False, "update")], t[(True, "update")], t[(False, "log_prob")], t[(True, "log_prob")]
        ratios.append((u0 + l0) / (u1 + l1))
        tokens = sum(len(ids) for ids, _ in rows)
        print(
            f"{m['step']:>4} {len(rows):>5} {tokens:>7} | {u0:>12.1f} {u1:>7.1f} {u0 / u1:>5.2f} | {l0:>11.1f} "
            f"{l1:>7.1f} {l0 / l1:>5.2f}",
            flush=True,
        )
    median = statistics.median(ratios)
    print(f"[bench] same rows, update + log-probs: median {median:.2f}x faster shared {TARGET_ACTOR.verdict(median)}")


def shared_prefix_main(args) -> None:
    runs = run_both_settings(args)
    print_run_timers(runs, args.steps)
    replay_same_rows(args, runs[False])


def against_torch(args, metrics: list[dict]) -> None:
    """Each step's rows through plain torch, beside verl's timers for them (no target: a ratio to read)."""
    import torch

    tok, model = real_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    micro = args.micro or 16
    print(f"[bench] torch {torch.__version__}, {torch.get_num_threads()} threads, fp32, micro-batch {micro}")
    header = f"{'step':>4} {'rows':>5} {'tokens':>7} | {'verl upd s':>10} {'torch upd s':>11} {'ratio':>6} | "
    header += f"{'verl lp s':>9} {'torch lp s':>10} {'ratio':>6} | {'verl ms/tok upd':>15} {'torch':>6}"
    print(header, flush=True)
    ratios_u, ratios_l = [], []
    for m in metrics:
        rows = step_rows(Path(args.out), m["step"], tok)
        tokens = sum(len(ids) for ids, _ in rows)
        tu, tl = torch_update(model, opt, rows, micro), torch_log_probs(model, rows, micro)
        vu, vl = m["timing_s/update_actor"], m["timing_s/old_log_prob"]
        ratios_u.append(vu / tu)
        ratios_l.append(vl / tl)
        print(
            f"{m['step']:>4} {len(rows):>5} {tokens:>7} | {vu:>10.1f} {tu:>11.1f} {vu / tu:>6.2f} | {vl:>9.1f} "
            f"{tl:>10.1f} {vl / tl:>6.2f} | {1000 * vu / tokens:>15.1f} {1000 * tu / tokens:>6.1f}",
            flush=True,
        )
    print(
        f"[bench] median verl / torch: update_actor {statistics.median(ratios_u):.2f}x, "
        f"old_log_prob {statistics.median(ratios_l):.2f}x"
    )


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--micro", type=int, default=None, help="torch micro-batch (default: the run's actor micro-batch)")
    p.add_argument("--out", default="outputs/bench_actor_cpu")
    p.add_argument("--reuse", action="store_true", help="replay an earlier run in --out instead of running verl")
    p.add_argument("--shared-prefix", action="store_true", help="compare use_prefix_grouper false/true (see above)")
    p.add_argument("--micro-update", type=int, default=8, help="replay: the update's micro-batch (the real preset's)")
    p.add_argument("--micro-lp", type=int, default=16, help="replay: the log-prob micro-batch (the real preset's)")
    p.add_argument("--temperature", type=float, default=0.6, help="replay: the sampling temperature (the preset's)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides for the verl run")
    args = p.parse_args(argv)
    if args.shared_prefix:
        shared_prefix_main(args)
    else:
        against_torch(args, run_verl(Path(args.out), args.steps, args.overrides, reuse=args.reuse))


if __name__ == "__main__":
    main()
