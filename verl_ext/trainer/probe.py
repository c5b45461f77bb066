"""Pass-rate probe: sample k responses for every prompt of a data set through verl's rollout, score them with the
configured reward, and say what the histogram predicts for plain, dapo and fast sampling (the SPEED-RL experiment
log's "Initial Test to Dataset", as a command: `python -m recipe.fast_dapo.probe`, docs/CURRICULUM.md).

The trainer class is the project's trainer with a `fit` that trains nothing: the workers, the rollout servers, the
weight sync and the reward are verl's, started exactly as a training run starts them, so the probe measures the
policy a run with the same overrides would start from. The arithmetic is in `verl_ext.curriculum.pass_rates`.

Outputs in `probe.out_dir`: `pass_rates.jsonl` (one line per prompt: index, memory key, k, correct),
`probe.json` (pass@1, the pass@k histogram, the prediction; with several data sources in the data, the same per
data source under `by_source`), `probe.png` (the histogram).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from verl_ext.curriculum.pass_rates import BINS, pass_histogram, predict_costs
from verl_ext.trainer.ppo_trainer import ExtRayPPOTrainer
from verl_ext.trainer.sampled_eval import sample_counts

PASS_RATES_FILE = "pass_rates.jsonl"
SUMMARY_FILE = "probe.json"


@dataclass(frozen=True)
class ProbeSettings:
    k: int  # responses per prompt
    prompts_per_call: int  # prompts per generation call
    out_dir: Path
    metric: str  # the reward key that says "right" (curriculum.filter_metric)

    @classmethod
    def from_config(cls, cfg) -> ProbeSettings:
        """From the fast DAPO config after the recipe's `prepare_config`, which writes every curriculum key (its
        defaults live in fast_dapo.yaml only; none here)."""
        p = cfg.probe
        return cls(int(p.k), int(p.prompts_per_call), Path(p.out_dir), str(cfg.curriculum.filter_metric))


class PassRateProbeTrainer(ExtRayPPOTrainer):
    def fit(self):
        s = ProbeSettings.from_config(self.config)
        self.checkpoint_manager.update_weights(0)  # the rollout servers start without the actor's weights
        self._rollout_awake = True
        counts, index, keys, sources = self._sample(s)
        summary = self._summary(s, counts)
        if len(set(sources.tolist())) > 1:
            summary["by_source"] = by_source(counts, sources, s.k)
        write_outputs(s.out_dir, summary, counts, index, keys, sources)
        # printed by the driver process (the TaskRunner returns them; verl_ext/trainer/launch.py)
        self.closing_lines = format_summary(summary, s.out_dir).splitlines()

    def _sample(self, s: ProbeSettings) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        sampled = sample_counts(
            self,
            self.train_dataset,
            s.k,
            s.prompts_per_call,
            s.metric,
            key_column=self.config.curriculum.memory.key,
            desc=f"probe: {s.k} responses per prompt",
        )
        return sampled.counts, sampled.index, sampled.keys, sampled.sources

    def _summary(self, s: ProbeSettings, counts: np.ndarray) -> dict:
        cur = self.config.curriculum
        n = int(self.config.actor_rollout_ref.rollout.n)
        N = n + int(cur.n_continue)
        data = self.config.data
        summary = {
            "k": s.k,
            "prompts": len(counts),
            "pass@1": float(counts.sum() / (s.k * len(counts))),
            "histogram": pass_histogram(counts, s.k),
            "model": str(self.config.actor_rollout_ref.model.path),
            "data": str(data.train_files),
        }
        if n >= 2 and N > n:
            gen = data.get("gen_batch_size") or data.train_batch_size
            summary["prediction"] = predict_costs(counts, s.k, N, n, int(data.train_batch_size), int(gen)).as_dict()
        return summary


def by_source(counts: np.ndarray, sources: np.ndarray, k: int) -> dict:
    """Per data source: prompts, pass@1 and the pass@k histogram."""
    out = {}
    for source in sorted(set(sources.tolist())):
        c = counts[sources == source]
        out[source] = {"prompts": len(c), "pass@1": float(c.sum() / (k * len(c))), "histogram": pass_histogram(c, k)}
    return out


def write_outputs(
    out_dir: Path, summary: dict, counts: np.ndarray, index: np.ndarray, keys: np.ndarray, sources: np.ndarray
) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / PASS_RATES_FILE, "w") as f:
        for c, i, key, src in zip(counts, index, keys, sources, strict=True):
            row = {"index": _plain(i), "memory_key": _plain(key), "data_source": src, "k": summary["k"]}
            f.write(json.dumps({**row, "correct": int(c)}))
            f.write("\n")
    (out_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    plot_histogram(summary, out_dir / "probe.png")


def read_pass_rates(path: str | Path) -> tuple[np.ndarray, np.ndarray, int]:
    """(memory keys, correct counts, k) of a probe's pass_rates.jsonl, for seeding the pass-rate memory."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    if not rows:
        raise ValueError(f"{path}: no prompts")
    ks = {r["k"] for r in rows}
    if len(ks) != 1:
        raise ValueError(f"{path}: prompts were probed with different k {sorted(ks)}")
    if any(r["memory_key"] is None for r in rows):
        raise ValueError(f"{path}: the probe's data had no column for curriculum.memory.key; probe with that key")
    keys = np.array([r["memory_key"] for r in rows], dtype=np.uint64)
    return keys, np.array([r["correct"] for r in rows], dtype=np.int64), ks.pop()


def _plain(x):
    return x.item() if hasattr(x, "item") else x


def plot_histogram(summary: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hist = summary["histogram"]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.bar(range(len(BINS)), [hist[b] for b in BINS], color=["#c44", "#4a4"] + ["#48c"] * 10)
    ax.set_xticks(range(len(BINS)), BINS, rotation=45, ha="right")
    ax.set_ylabel("share of prompts")
    ax.set_title(f"pass@{summary['k']} over {summary['prompts']} prompts (pass@1 {summary['pass@1']:.3f})")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def format_summary(summary: dict, out_dir: Path) -> str:
    h = summary["histogram"]
    mixed = 1.0 - h["zeros"] - h["ones"]
    lines = [
        f"[probe] {summary['prompts']} prompts x {summary['k']} responses: pass@1 {summary['pass@1']:.3f}; "
        f"all-wrong {h['zeros']:.3f}, all-right {h['ones']:.3f}, mixed {mixed:.3f}",
        "[probe] " + "  ".join(f"{b} {h[b]:.3f}" for b in BINS),
    ]
    for source, sub in summary.get("by_source", {}).items():
        hs = sub["histogram"]
        lines.append(
            f"[probe]   {source}: {sub['prompts']} prompts, pass@1 {sub['pass@1']:.3f}; all-wrong {hs['zeros']:.3f}, "
            f"all-right {hs['ones']:.3f}, mixed {1.0 - hs['zeros'] - hs['ones']:.3f}"
        )
    pred = summary.get("prediction")
    if pred:
        lines.append(
            f"[probe] predicted at N={pred['N']}, n={pred['n']}, {pred['train_batch_size']} prompts/step, "
            f"{pred['gen_batch_size']} screened/call:"
        )
        for mode in ("plain", "dapo", "fast"):
            m = pred[mode]
            lines.append(
                f"[probe]   {mode:5s} keep {m['keep_rate']:.3f}  responses/step {m['responses_per_step']:.0f}  "
                f"calls/step {m['calls_per_step']:.2f}  responses/informative group "
                f"{m['responses_per_informative_group']:.1f}"
            )
        lines.append(
            f"[probe]   fast/dapo {pred['fast_vs_dapo']:.3f}, fast/plain {pred['fast_vs_plain']:.3f} (responses per "
            f"informative group); best n {pred['best_n']} (fast/dapo {pred['best_n_fast_vs_dapo']:.3f})"
        )
    lines.append(f"[probe] wrote {out_dir / PASS_RATES_FILE}, {out_dir / SUMMARY_FILE}, {out_dir / 'probe.png'}")
    return "\n".join(lines)
