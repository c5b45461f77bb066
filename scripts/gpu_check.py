"""The project's pure-torch pieces on a CUDA device, against the same call on CPU: what a GPU user's batch goes
through without verl (every advantage estimator and uncertainty kind, the group statistics, the Composer's JSD,
SDPO top-k JSD and DPO losses, fast DAPO's staleness split of the rollout/actor gap, the shared-prefix log-prob
gather).

    python scripts/gpu_check.py                 # on a machine with CUDA and torch; exits 1 on any mismatch
    python scripts/gpu_check.py --device cpu    # the script's own check, here: CPU against CPU

Each check builds its inputs on CPU, runs the function there and on CUDA with the same inputs moved over, and
asserts the output stays on the input's device with the input's dtype and agrees with the CPU result (float32
tolerances: the two devices reduce in different orders). Then it times the advantage pipeline on a GPU-sized batch
on both devices (median of repeated calls, CUDA synchronised). No verl, Ray or vLLM is needed: only torch, numpy
and omegaconf (the advantage config's reader).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback

import numpy as np
import torch

FAILURES: list[str] = []
DEV = "cuda"  # the device checked against CPU (--device)


def check(name: str):
    def wrap(fn):
        try:
            fn()
            print(f"ok    {name}", flush=True)
        except Exception:  # noqa: BLE001 -- report every check, then fail at the end
            FAILURES.append(name)
            print(f"FAIL  {name}\n{traceback.format_exc()}", flush=True)
        return fn

    return wrap


def close(cpu: torch.Tensor, gpu: torch.Tensor, what: str, rtol=2e-5, atol=1e-6) -> None:
    assert gpu.device.type == DEV, f"{what}: on {gpu.device}"
    assert gpu.dtype == cpu.dtype, f"{what}: dtype {gpu.dtype} != {cpu.dtype}"
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


def advantage_batch(seed: int, bs: int, T: int, group: int, device: str = "cpu") -> dict:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (bs,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    rewards = torch.zeros(bs, T)
    rewards[torch.arange(bs), lengths - 1] = (torch.rand(bs, generator=g) < 0.5).float()
    logp = -torch.empty(bs, T).exponential_(generator=g) * 2
    ent = torch.empty(bs, T).exponential_(generator=g)
    plan = (torch.rand(bs, T, generator=g) < 0.3) & mask.bool()
    index = np.array([f"g{i // group}" for i in range(bs)], dtype=object)
    b = dict(rewards=rewards, mask=mask, logp=logp, ent=ent, plan=plan)
    return {**{k: v.to(device) for k, v in b.items()}, "index": index}


def run_advantages(b: dict, estimator: str, **cfg) -> torch.Tensor:
    from verl_ext.advantage import AdvantageConfig, AdvantageInputs, compute_advantages

    config = AdvantageConfig.from_algorithm(cfg, adv_estimator=estimator)
    inputs = AdvantageInputs(
        b["rewards"],
        b["mask"],
        b["index"],
        old_log_probs=b["logp"],
        entropys=b["ent"],
        planning_mask=b["plan"],
        sepa_lambda=0.4,
    )
    return compute_advantages(config, inputs)


def sync() -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


def main() -> int:
    global DEV
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", help="the device compared against CPU")
    DEV = p.parse_args().device
    if DEV == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: nothing to check", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name(0) if DEV == "cuda" else DEV
    print(f"torch {torch.__version__}, {name}", flush=True)

    @check("group statistics follow the input's device (ids on CPU and on CUDA)")
    def _groups():
        from verl_ext.advantage.groups import group_mean, group_mean_std, group_range

        values = torch.randn(1000, dtype=torch.float64)
        gid = torch.randint(0, 37, (1000,))
        for gid_dev in ("cpu", DEV):
            for fn in (group_mean, group_range):
                close(fn(values, gid, 37), fn(values.to(DEV), gid.to(gid_dev), 37), f"{fn.__name__} ids on {gid_dev}")
            m_cpu, s_cpu = group_mean_std(values, gid, 37)
            m_gpu, s_gpu = group_mean_std(values.to(DEV), gid.to(gid_dev), 37)
            close(m_cpu, m_gpu, "group_mean_std mean")
            close(s_cpu, s_gpu, "group_mean_std std")

    for mode in ("grpo", "maxrl"):
        for transform in ("none", "gtpo", "gtpo_hicra", "gtpo_sepa"):
            kinds = ("surprisal",) if transform == "none" else ("surprisal", "predictive_variance", "shannon_entropy")
            for kind in kinds:

                @check(f"advantages: composable {mode} + {transform} ({kind})")
                def _adv(mode=mode, transform=transform, kind=kind):
                    cfg = dict(advantage_mode=mode, transform_mode=transform, uncertainty_kind=kind, gtpo_beta=0.3)
                    b = advantage_batch(0, bs=64, T=48, group=8)
                    cpu = run_advantages(b, "composable", **cfg)
                    gpu = run_advantages(advantage_batch(0, bs=64, T=48, group=8, device=DEV), "composable", **cfg)
                    close(cpu, gpu, "token advantages")

    for estimator in ("maxrl", "gtpo", "gtpo_hicra", "gtpo_sepa"):

        @check(f"advantages: registered estimator {estimator}")
        def _est(estimator=estimator):
            cpu = run_advantages(advantage_batch(1, bs=64, T=48, group=8), estimator)
            gpu = run_advantages(advantage_batch(1, bs=64, T=48, group=8, device=DEV), estimator)
            close(cpu, gpu, estimator)

    @check("Composer: generalized JSD (beta 0, 0.5, 1), value and gradient, SmolLM2's vocabulary")
    def _jsd():
        from verl_ext.composer.jsd import generalized_jsd_loss

        g = torch.Generator().manual_seed(0)
        student = torch.randn(4, 33, 49152, generator=g)
        teacher = torch.randn(4, 33, 49152, generator=g)
        labels = torch.randint(0, 49152, (4, 33), generator=g)
        labels[:, :5] = -100
        for beta in (0.0, 0.5, 1.0):
            s_cpu = student.detach().clone().requires_grad_(True)
            s_gpu = student.detach().clone().to(DEV).requires_grad_(True)
            l_cpu = generalized_jsd_loss(s_cpu, teacher, labels, beta=beta, chunk_size=64)
            l_gpu = generalized_jsd_loss(s_gpu, teacher.to(DEV), labels.to(DEV), beta=beta, chunk_size=64)
            l_cpu.backward()
            l_gpu.backward()
            close(l_cpu.detach(), l_gpu.detach(), f"jsd beta={beta}", rtol=1e-4, atol=1e-5)
            close(s_cpu.grad, s_gpu.grad, f"jsd grad beta={beta}", rtol=1e-3, atol=1e-7)

    @check("Composer: DPO loss and metrics")
    def _dpo():
        from verl_ext.composer.dpo import dpo_loss

        g = torch.Generator().manual_seed(1)
        x = [torch.randn(16, generator=g) for _ in range(4)]
        l_cpu, m_cpu = dpo_loss(*x, beta=0.1)
        l_gpu, m_gpu = dpo_loss(*(t.to(DEV) for t in x), beta=0.1)
        close(l_cpu, l_gpu, "dpo loss")
        for key, value in m_cpu.items():
            assert abs(value - m_gpu[key]) <= 1e-5 * max(1.0, abs(value)), (key, value, m_gpu[key])

    @check("Composer: SDPO top-k generalized JSD (k 64 of SmolLM2's vocabulary), value and gradient")
    def _topk_jsd():
        from verl_ext.composer.sdpo import sdpo_kl_estimate, topk_generalized_jsd

        g = torch.Generator().manual_seed(4)
        student = torch.randn(96, 49152, generator=g)
        teacher_lp, teacher_ids = torch.randn(96, 49152, generator=g).log_softmax(-1).topk(64, dim=-1)
        for beta in (0.0, 0.5, 1.0):
            s_cpu = student.detach().clone().requires_grad_(True)
            s_gpu = student.detach().clone().to(DEV).requires_grad_(True)
            l_cpu = topk_generalized_jsd(s_cpu, teacher_lp, teacher_ids, beta=beta, token_clip=0.05)
            l_gpu = topk_generalized_jsd(s_gpu, teacher_lp.to(DEV), teacher_ids.to(DEV), beta=beta, token_clip=0.05)
            l_cpu.sum().backward()
            l_gpu.sum().backward()
            close(l_cpu.detach(), l_gpu.detach(), f"top-k jsd beta={beta}", rtol=1e-4, atol=1e-6)
            close(s_cpu.grad, s_gpu.grad, f"top-k jsd grad beta={beta}", rtol=1e-3, atol=1e-7)
        lp, mask = torch.randn(2, 8, 20, generator=g), torch.rand(8, 20, generator=g) < 0.5
        kl_cpu = sdpo_kl_estimate(lp[0], lp[1], mask)
        kl_gpu = sdpo_kl_estimate(lp[0].to(DEV), lp[1].to(DEV), mask.to(DEV))
        assert abs(kl_cpu - kl_gpu) <= 1e-5, (kl_cpu, kl_gpu)

    @check("fast DAPO: rollout/actor probability gap split by the rows' staleness")
    def _staleness():
        import importlib.util
        from pathlib import Path

        # verl_ext.curriculum's package imports verl (its DataProto ops): load the numpy + torch module alone
        path = Path(__file__).resolve().parents[1] / "verl_ext" / "curriculum" / "staleness.py"
        spec = importlib.util.spec_from_file_location("staleness", path)
        staleness = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(staleness)
        probs_diff_by_staleness = staleness.probs_diff_by_staleness

        g = torch.Generator().manual_seed(5)
        rollout, old = -torch.rand(2, 12, 30, generator=g) * 3
        mask = torch.rand(12, 30, generator=g) < 0.7
        age = np.array([0, 1] * 6)
        cpu = probs_diff_by_staleness(rollout, old, mask, age)
        gpu = probs_diff_by_staleness(rollout.to(DEV), old.to(DEV), mask.to(DEV), age)
        assert cpu.keys() == gpu.keys() and all(abs(cpu[k] - gpu[k]) <= 1e-6 for k in cpu), (cpu, gpu)

    @check("shared prefix: per-row log-probs and entropies gathered from packs")
    def _packs():
        from verl_ext.shared_prefix.packing import plan_packs, row_log_probs

        g = torch.Generator().manual_seed(2)
        prompts = [torch.randint(1, 500, (n,), generator=g) for n in (7, 12)]
        rows, plens = [], []
        for p in prompts:
            for _ in range(4):
                rows.append(torch.cat([p, torch.randint(1, 500, (int(torch.randint(1, 9, (1,), generator=g)),))]))
                plens.append(p.numel())
        plan = plan_packs(rows, plens)
        logits = torch.randn(plan.num_packs, plan.input_ids.shape[1], 512, generator=g)
        labels = torch.randint(0, 512, (plan.row_to_used.numel(),), generator=g)
        temp = torch.full((plan.num_packs,), 0.7)
        lp_cpu, ent_cpu = row_log_probs(logits, plan, labels, temp, with_entropy=True)
        plan_gpu = type(plan)(**{k: (v.to(DEV) if torch.is_tensor(v) else v) for k, v in vars(plan).items()})
        lp_gpu, ent_gpu = row_log_probs(logits.to(DEV), plan_gpu, labels.to(DEV), temp.to(DEV), with_entropy=True)
        close(lp_cpu, lp_gpu, "row log-probs", rtol=1e-4, atol=1e-5)
        close(ent_cpu, ent_gpu, "row entropies", rtol=1e-4, atol=1e-5)

    @check("timing: the advantage pipeline on a GPU-sized batch (gtpo_sepa, bs 4096 x T 2048)")
    def _timing():
        cfg = dict(advantage_mode="maxrl", transform_mode="gtpo_sepa", uncertainty_kind="shannon_entropy")
        for device in ("cpu", DEV):
            bs, T = (4096, 2048) if DEV == "cuda" else (256, 128)  # --device cpu: the script's own check, kept small
            b = advantage_batch(3, bs=bs, T=T, group=16, device=device)
            times = []
            for i in range(6):
                sync()
                t0 = time.perf_counter()
                run_advantages(b, "composable", **cfg)
                sync()
                if i:  # the first call warms up
                    times.append(time.perf_counter() - t0)
            print(f"      {device}: median {statistics.median(times) * 1e3:.1f} ms per call (5 calls)", flush=True)

    print(f"{len(FAILURES)} failed" + (f": {FAILURES}" if FAILURES else ""), flush=True)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
