"""Benchmark for the Composer recipe's pure parts.

Section 1 (measured here): generalized_jsd_loss, chunked (verl_ext.composer) vs an unchunked dense autograd
implementation (TRL / OPSD style), forward + backward, at a 150k vocabulary. For each (implementation, token count)
a fresh subprocess builds the inputs (student logits with grad, teacher logits without), records its resident set
size, resets the kernel's peak-RSS counter (/proc/self/clear_refs), runs forward + backward once and reads the peak
(VmHWM). "extra peak" = peak - RSS with the inputs allocated, i.e. what the loss itself costs, the gradient of the
student logits (tokens x vocab, needed by both) included. Another fresh subprocess times `--reps` forward + backward
runs after a warm-up (median).
Goal: extra peak of the chunked form at least 4x lower than the dense one.

Section 2: the per-channel step cost, side by side in one run. The composer recipe (`+preset=cpu_demo`: tiny Qwen2,
toy task, vLLM-CPU rollout, FSDP2 actor) runs `--steps` steps per arm (baseline = plain GRPO, +SDPO full-logit,
+SDPO sampled-token, +replay, full), each in its own process, with three teachers on the toy teacher server
(127.0.0.1, `--teacher-latency-s` per answer, longer than a step). From each run's JSONL (steps 2.., step 1 has
vLLM's warm-up): seconds per step and its ratio to baseline, the SDPO teacher pass per error-site row against the
old-log-prob pass per batch row (goal: SDPO adds at most the forward passes of its error-site rows, i.e. ratio ~1
per row; the verdict checks "at most": <= 1), and the replay channel's time on the step (goal: teacher calls never
block the rollout, i.e. far below the teacher latency; a call waited on would cost a whole latency, so the verdict
checks < the latency). Each target is printed beside its figure with PASS or MISS.

    .venv/bin/python scripts/bench_composer.py                      # both sections
    .venv/bin/python scripts/bench_composer.py --section jsd --tokens 256 512 1024 --reps 3
    .venv/bin/python scripts/bench_composer.py --section steps --steps 6
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from benchlib import Target, print_result, run_child, warm_mean

from verl_ext.launch.local_run import run_recipe

ENTRY = "recipe.composer.main"
MEM_TARGET = Target(">=", 4, "x")  # dense extra peak / chunked extra peak
PER_ROW_TARGET = Target("<=", 1, "x")  # SDPO teacher pass per error-site row / old-log-prob pass per batch row
ROWS_PER_STEP = 32  # the cpu_demo preset's batch: 8 prompts x 4 responses
ARMS = {  # name: overrides (the +arm config group sets the channel weights)
    "baseline": ["+arm=baseline"],
    "sdpo_full_logit": ["+arm=sdpo", "composer.sdpo.form=full_logit"],
    "sdpo_sampled": ["+arm=sdpo", "composer.sdpo.form=sampled_token"],
    "replay": ["+arm=replay"],
    "full": ["+arm=full"],
}


def dense_jsd(student, teacher, beta, temperature=1.0):
    """Unchunked reference: the whole (tokens x vocab) computation in one autograd graph (batchmean)."""
    s = F.log_softmax(student / temperature, dim=-1)
    t = F.log_softmax(teacher / temperature, dim=-1)
    b = torch.tensor(beta, dtype=s.dtype)
    m = torch.logsumexp(torch.stack([s + torch.log(1 - b), t + torch.log(b)]), dim=0)
    kl_t = F.kl_div(m, t, reduction="none", log_target=True)
    kl_s = F.kl_div(m, s, reduction="none", log_target=True)
    jsd = b * kl_t + (1 - b) * kl_s
    return jsd.sum() / student.shape[0]


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        return True
    except OSError:
        return False


def worker(impl: str, measure: str, n_tokens: int, vocab: int, beta: float, chunk_size: int | None, reps: int) -> dict:
    from verl_ext.composer import generalized_jsd_loss

    torch.manual_seed(0)
    student = (torch.randn(n_tokens, vocab) * 2).requires_grad_(True)
    teacher = torch.randn(n_tokens, vocab) * 2

    def step():
        if impl == "dense":
            loss = dense_jsd(student, teacher, beta)
        else:
            loss = generalized_jsd_loss(student, teacher, beta=beta, chunk_size=chunk_size)
        loss.backward()
        value = loss.item()
        student.grad = None
        return value

    if measure == "time":
        step()  # warm-up
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        return {"time_s": statistics.median(times)}

    baseline_kib = _status_kib("VmRSS")
    exact = _reset_peak()
    if not exact:  # no clear_refs: the lifetime peak, which the inputs already set, is the best we have
        baseline_kib = max(baseline_kib, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    value = step()
    peak_kib = _status_kib("VmHWM") if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "loss": value,
        "inputs_mib": 2 * n_tokens * vocab * 4 / 2**20,
        "extra_peak_mib": (peak_kib - baseline_kib) / 1024,
        "peak_exact": exact,
    }


def run_in_subprocess(args, impl: str, measure: str, n_tokens: int) -> dict:
    worker_args = ["--worker", impl, "--measure", measure, "--tokens", str(n_tokens), "--vocab", str(args.vocab)]
    worker_args += ["--beta", str(args.beta), "--reps", str(args.reps)]
    if args.chunk_size:
        worker_args += ["--chunk-size", str(args.chunk_size)]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    if measure == "mem":
        # A fixed mmap threshold turns off glibc's dynamic one, so every block above 128 KiB is mmap'ed and unmapped
        # on free: RSS then follows live tensor memory instead of keeping freed chunks in the heap. It slows
        # allocation down, so timings run in a separate process with the default allocator.
        env["MALLOC_MMAP_THRESHOLD_"] = "131072"
    return run_child(__file__, worker_args, env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab", type=int, default=150_000)
    parser.add_argument("--tokens", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--beta", type=float, default=0.5)
    parser.add_argument("--chunk-size", type=int, default=None, help="tokens per chunk (default: about 2**22 logits)")
    parser.add_argument("--reps", type=int, default=3, help="timed forward+backward runs (median), after a warm-up")
    parser.add_argument("--section", choices=["jsd", "steps", "all"], default="all")
    parser.add_argument("--steps", type=int, default=6, help="section 2: training steps per arm")
    parser.add_argument("--teacher-latency-s", type=float, default=3.0, help="section 2: the toy teachers' latency")
    parser.add_argument("--out", default="outputs/bench_composer", help="section 2: run directories and logs")
    parser.add_argument(
        "--arms",
        nargs="+",
        choices=[a for a in ARMS if a != "baseline"],
        default=[a for a in ARMS if a != "baseline"],
        help="section 2: arms besides the baseline",
    )
    parser.add_argument("--worker", choices=["dense", "chunked"], help=argparse.SUPPRESS)
    parser.add_argument("--measure", choices=["mem", "time"], default="mem", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        result = worker(args.worker, args.measure, args.tokens[0], args.vocab, args.beta, args.chunk_size, args.reps)
        print_result(result)
        return

    if args.section in ("jsd", "all"):
        jsd_section(args)
    if args.section in ("steps", "all"):
        steps_section(args)


def jsd_section(args) -> None:
    from verl_ext.composer.jsd import _DEFAULT_CHUNK_ELEMENTS

    chunk = args.chunk_size or max(1, _DEFAULT_CHUNK_ELEMENTS // args.vocab)
    print(
        f"== 1. generalized_jsd_loss forward+backward, vocab {args.vocab}, beta {args.beta}, fp32, "
        f"chunk {chunk} tokens, torch threads {torch.get_num_threads()} =="
    )
    header = (
        f"{'tokens':>7} {'inputs MiB':>11} {'dense extra MiB':>16} {'chunked extra MiB':>18} {'mem ratio':>10} "
        f"{'dense s':>8} {'chunked s':>10} {'time ratio':>11} {'|dloss|':>9}"
    )
    print(header)
    for n in args.tokens:
        dense = run_in_subprocess(args, "dense", "mem", n) | run_in_subprocess(args, "dense", "time", n)
        chunked = run_in_subprocess(args, "chunked", "mem", n) | run_in_subprocess(args, "chunked", "time", n)
        ratio = dense["extra_peak_mib"] / max(chunked["extra_peak_mib"], 1e-9)
        print(
            f"{n:>7} {dense['inputs_mib']:>11.0f} {dense['extra_peak_mib']:>16.0f} {chunked['extra_peak_mib']:>18.0f} "
            f"{ratio:>9.1f}x {dense['time_s']:>8.2f} {chunked['time_s']:>10.2f} "
            f"{chunked['time_s'] / dense['time_s']:>10.2f}x {abs(dense['loss'] - chunked['loss']):>9.1e} "
            f"{MEM_TARGET.verdict(ratio)}"
        )
        if not (dense["peak_exact"] and chunked["peak_exact"]):
            print("   (peak from ru_maxrss: /proc/self/clear_refs unavailable, numbers are upper bounds)")
    print(
        "   extra = peak RSS during one forward+backward minus RSS with the inputs allocated; "
        "both include the tokens x vocab gradient. The target is the mem ratio's."
    )


def run_arm(name: str, overrides: list[str], teachers: str, steps: int, out: Path) -> list[dict]:
    run_dir = out / name
    shutil.rmtree(run_dir, ignore_errors=True)
    print(f"[bench] {name}: {ENTRY} +preset=cpu_demo {' '.join(overrides)}", flush=True)
    overrides = [
        "+preset=cpu_demo",
        *overrides,
        f"composer.replay.teacher_pool.teachers={teachers}",
        f"trainer.total_training_steps={steps}",
        f"trainer.experiment_name=bench_{name}",
    ]
    return run_recipe(ENTRY, overrides, run_dir, out / f"{name}.log")


def run_arms(args) -> dict[str, list[dict]]:
    """{arm: its run's metric rows}, the baseline first, every arm with three toy teachers (two right, one wrong)."""
    from verl_ext.toy.teacher_server import ToyTeacherServer

    out = Path(args.out)
    server = ToyTeacherServer(latency_s=args.teacher_latency_s)
    teachers = (
        "["
        + ",".join(
            f"{{name: {n}, base_url: '{server.base_url}', model: {m}, api_key_env: null, timeout_s: 30}}"
            for n, m in (("t1", "right"), ("t2", "right"), ("t3", "wrong"))
        )
        + "]"
    )
    try:
        return {name: run_arm(name, ARMS[name], teachers, args.steps, out) for name in ["baseline", *args.arms]}
    finally:
        server.close()


def arm_figures(rows: list[dict]) -> dict[str, float]:
    """An arm's means over steps 2.. and the SDPO teacher pass against the old-log-prob pass, per row and per token."""
    old_lp = warm_mean(rows, "timing_s/old_log_prob")
    sites, teacher_s = warm_mean(rows, "sdpo/error_sites"), warm_mean(rows, "timing_s/sdpo_teacher")
    teacher_tokens = warm_mean(rows, "sdpo/teacher_tokens")
    per_row = per_token = float("nan")  # no SDPO teacher pass in this arm
    if sites:
        per_row = (teacher_s / sites) / (old_lp / ROWS_PER_STEP)
    if teacher_tokens:
        per_token = (teacher_s / teacher_tokens) / (old_lp / warm_mean(rows, "perf/total_num_tokens"))
    return {
        "step": warm_mean(rows, "timing_s/step"),
        "update": warm_mean(rows, "timing_s/update_actor"),
        "sites": sites,
        "teacher_s": teacher_s,
        "per_row": per_row,
        "per_token": per_token,
        "replay_s": warm_mean(rows, "timing_s/replay"),
        "pairs": warm_mean(rows, "replay/pairs_used"),
        "calls": float(rows[-1].get("teacher/calls", 0)),
        "has_replay": any("timing_s/replay" in r for r in rows),
    }


def steps_section(args) -> None:
    figures = {name: arm_figures(rows) for name, rows in run_arms(args).items()}
    base = figures["baseline"]["step"]
    print(
        f"\n== 2. per-channel step cost, composer cpu_demo preset (8 prompts x 4 responses, tiny Qwen2, vLLM-CPU + "
        f"FSDP2), {args.steps} steps per arm, means over steps 2..{args.steps}; teacher latency "
        f"{args.teacher_latency_s} s =="
    )
    print(
        f"{'arm':16s} {'s/step':>7} {'vs base':>8} {'update s':>9} {'sites/step':>10} {'teacher s':>10} "
        f"{'per-row ratio':>13} {'per-token':>9} {'replay s':>9} {'pairs/step':>10} {'teacher calls':>13}"
    )
    for name, f in figures.items():
        print(
            f"{name:16s} {f['step']:>7.2f} {f['step'] / base:>7.2f}x {f['update']:>9.2f} {f['sites']:>10.1f} "
            f"{f['teacher_s']:>10.2f} {f['per_row']:>12.2f}x {f['per_token']:>8.2f}x {f['replay_s']:>9.3f} "
            f"{f['pairs']:>10.1f} {f['calls']:>13.0f}"
        )
    print(
        "   per-row ratio = (SDPO teacher pass s / error-site rows) / (old-log-prob pass s / batch rows): one teacher "
        "row against one rollout row's forward pass (goal ~1). per-token: the same per token scored (teacher rows "
        "are longer: the hint is in their context). At this tiny size each call's fixed overhead dominates."
    )
    print(
        "   replay s = the replay channel's time on the step (collecting arrived answers, scoring the pairs, "
        "submitting the next queries); the teachers' own latency never appears in it."
    )
    print_arm_verdicts(figures, Target("<", args.teacher_latency_s, " s (the teacher latency)"))


def print_arm_verdicts(figures: dict[str, dict], replay_target: Target) -> None:
    """Each channel's figure beside its target, for the arms that run the channel."""
    for name, f in figures.items():
        if f["sites"]:
            print(f"   {name}: SDPO per-row ratio {f['per_row']:.2f}x {PER_ROW_TARGET.verdict(f['per_row'])}")
        if f["has_replay"]:
            print(f"   {name}: replay s {f['replay_s']:.3f} {replay_target.verdict(f['replay_s'])}")


if __name__ == "__main__":
    main()
