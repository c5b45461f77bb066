"""How much host memory a run on the CPU backend will hold at its peak, worked out from its config before Ray starts,
and whether that fits what the machine has free now: the pre-flight's warning before a run that Ray's memory monitor
would kill part-way (it kills a worker once the machine's memory in use passes 95% of the total,
RAY_memory_usage_threshold).

On the CPU backend every part of a run lives in host memory: the actor and reference (one FSDP worker), the rollout's
vLLM engine and its KV cache, the processes around them. The parts that hold their memory for the whole run, plus the
largest of what comes and goes (the parts peak at different moments: the update's activations while the actor
trains, a log-prob pass's logits, the agent episodes while they run):

    actor + reference   imports + P x (4 weights + 4 gradients + 8 Adam moments + 4 the reference's weights) bytes
    rollout engine      imports + P x 4 bytes + the KV cache (VLLM_CPU_KVCACHE_SPACE GiB)
    the rest            fixed sizes measured on this project's runs: the vLLM HTTP server and load balancer, the
                        driver, Ray's own processes, the TaskRunner, agent loop and reward workers
    + the largest of
      the update        rows x L tokens x (every layer's activations kept for the backward pass: eager attention's
                        6h + 2kv + 4I + heads x L floats a layer, or with activation checkpointing each layer's input
                        and one layer's activations; the logits three times over: logits, log-softmax, gradient,
                        and SDPO_LOGIT_COPIES more with the Composer's full-logit SDPO term), x UPDATE_FILL: rows are
                        shorter than L = prompt + response (measured)
      a log-prob pass   rows x L x 3 x vocab floats (forward only: the logits)
      agent episodes    AGENT_EPISODE_GIB per episode run at once

P, h, kv (key/value width), I (MLP width), heads, layers and vocab come from the model's config.json; every number is
float32, the CPU backend's only dtype. The constants are measured with scripts/measure_memory.py (docs/FAULTS.md,
"Memory"); tests/config/test_preflight_memory.py holds the estimate to the measured peaks of the shipped presets: never
more than 5% under one, at most 20% over.
It is an estimate, not a bound: a run whose responses all reach the maximum length holds more. A GPU backend holds
the actor and the rollout in device memory, which verl and vLLM size themselves (gpu_memory_utilization): no estimate
there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from verl_ext.config.settings import get

GIB = 2**30  # every size here is in GiB, as scripts/measure_memory.py reports them
FLOAT = 4  # bytes: float32
RAY_KILL_FRACTION = 0.95  # Ray's memory monitor: RAY_memory_usage_threshold's default
# measured on the shipped presets, SmolLM2-135M, 2026-11-28 (scripts/measure_memory.py: PSS, peak of each part)
ACTOR_IMPORTS_GIB = 1.0  # the FSDP worker before its model: torch, transformers, verl
ENGINE_IMPORTS_GIB = 2.8  # the vLLM engine before its weights and KV cache (the CPU worker, its buffers)
FIXED_GIB = {
    "rollout server": 1.3,  # vLLM's HTTP server and verl's load balancer
    "driver": 1.1,
    "Ray's processes": 0.5,  # GCS, raylet, idle workers, once the run is up (1.1 at start-up, when little else is)
    "trainer, agent loop, reward": 1.9,  # the TaskRunner, the agent loop worker and its gateway, the reward workers
}
UPDATE_FILL = 0.8  # the update's activations over their full-length bound: 0.81 on the agent preset's run
SDPO_LOGIT_COPIES = 5  # the full-logit JSD's vocabulary-wide tensors a token (its probabilities, mixture, logs and
# gradients): the agent Composer's full arm held 7.6 GiB in its actor against the baseline arm's 5.6 (2026-11-28)
AGENT_EPISODE_GIB = 0.05  # one agent episode forked from the warm interpreter (1.5 GiB at 32 at once)
KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"  # GiB of KV cache, set by the CPU backend's hydra.job.env_set
CPU_BACKEND = Path(__file__).resolve().parents[1] / "backend" / "cpu.yaml"


@dataclass(frozen=True)
class ModelShape:
    params: int
    hidden: int
    kv: int  # key/value width: key-value heads x head size
    mlp: int
    heads: int
    layers: int
    vocab: int

    @classmethod
    def from_hf_config(cls, c: dict) -> ModelShape:
        h, layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
        heads = c["num_attention_heads"]
        head_dim = c.get("head_dim") or h // heads
        kv = c.get("num_key_value_heads", heads) * head_dim
        mlp = c["intermediate_size"]
        per_layer = h * heads * head_dim * 2 + h * kv * 2 + 3 * h * mlp + 2 * h  # q, o; k, v; gate, up, down; norms
        embeddings = vocab * h * (1 if c.get("tie_word_embeddings", False) else 2)
        return cls(embeddings + layers * per_layer + h, h, kv, mlp, heads, layers, vocab)


@dataclass(frozen=True)
class RunShape:
    """What the estimate reads from a config."""

    model: ModelShape
    seq_len: int  # prompt + response tokens
    update_rows: int  # the actor update's micro-batch
    log_prob_rows: int  # the largest log-prob micro-batch (actor, reference)
    reference: bool  # a reference model in the actor's worker
    kv_cache_gib: float
    agent_episodes: int  # agent episodes run at once (0: no agent)
    checkpointing: bool = False  # activation checkpointing: a layer's input kept, its activations recomputed
    sdpo_full_logit: bool = False  # the Composer's full-logit SDPO term: more vocabulary-wide tensors in the update


@dataclass(frozen=True)
class MemoryEstimate:
    parts_gib: dict[str, float]
    update_gib: float  # the actor's activations in an update micro-batch (what halving it saves half of)
    log_prob_gib: float

    @property
    def total_gib(self) -> float:
        return sum(self.parts_gib.values())

    def render(self) -> str:
        parts = ", ".join(f"{k} {v:.1f}" for k, v in self.parts_gib.items() if v >= 0.05)
        return f"~{self.total_gib:.1f} GiB at the peak ({parts})"


def estimate(shape: RunShape) -> MemoryEstimate:
    """The run's peak host memory on the CPU backend, by part (the module's docstring gives each formula)."""
    m, length = shape.model, shape.seq_len
    layer_floats = 6 * m.hidden + 2 * m.kv + 4 * m.mlp + m.heads * length
    logits_floats = 3 * m.vocab
    update_logits = logits_floats + (SDPO_LOGIT_COPIES * m.vocab if shape.sdpo_full_logit else 0)
    # with checkpointing, each layer keeps its input and one layer at a time its activations
    kept = m.layers * m.hidden + layer_floats if shape.checkpointing else m.layers * layer_floats
    update = UPDATE_FILL * shape.update_rows * length * (kept + update_logits) * FLOAT / GIB
    log_prob = shape.log_prob_rows * length * logits_floats * FLOAT / GIB
    episodes = AGENT_EPISODE_GIB * shape.agent_episodes
    states = m.params * FLOAT * (4 + (1 if shape.reference else 0)) / GIB
    passing = {"the update's activations": update, "a log-prob pass's logits": log_prob, "agent episodes": episodes}
    largest = max(passing, key=passing.get)
    parts = {
        "actor+ref": ACTOR_IMPORTS_GIB + states,
        "rollout engine": ENGINE_IMPORTS_GIB + m.params * FLOAT / GIB + shape.kv_cache_gib,
        **FIXED_GIB,
        largest: passing[largest],
    }
    return MemoryEstimate(parts, update, log_prob)


def run_shape(cfg: DictConfig, hf_config: dict) -> RunShape:
    """The estimate's inputs from a resolved config and its model's config.json."""
    arr = "actor_rollout_ref"
    log_prob = [get(cfg, f"{arr}.{role}.log_prob_micro_batch_size_per_gpu") for role in ("rollout", "ref")]
    agent = get(cfg, "external_agent") is not None or get(cfg, f"{arr}.rollout.multi_turn.enable", False)
    concurrent = max(int(get(cfg, "data.val_batch_size") or 0), int(get(cfg, "trainer.heldout.batch_size") or 0))
    reference = bool(get(cfg, f"{arr}.actor.use_kl_loss", False) or get(cfg, "algorithm.use_kl_in_reward", False))
    reference = reference or get(cfg, "composer") is not None  # the Composer's replay scores pairs by the reference
    return RunShape(
        model=ModelShape.from_hf_config(hf_config),
        seq_len=int(get(cfg, "data.max_prompt_length")) + int(get(cfg, "data.max_response_length")),
        update_rows=int(get(cfg, f"{arr}.actor.ppo_micro_batch_size_per_gpu") or 1),
        log_prob_rows=max(int(v) for v in log_prob if v) if any(log_prob) else 1,
        reference=reference,
        kv_cache_gib=kv_cache_gib(),
        agent_episodes=concurrent if agent else 0,
        checkpointing=bool(get(cfg, f"{arr}.model.enable_gradient_checkpointing", False)),
        sdpo_full_logit=float(get(cfg, "algorithm.alpha_sdpo", 0) or 0) > 0
        and get(cfg, "composer.sdpo.form") == "full_logit",
    )


def kv_cache_gib() -> float:
    """The rollout's KV cache: the variable as the driver's environment has it (Hydra sets it from the backend's
    hydra.job.env_set when a driver runs), else as the CPU backend sets it (a config composed in-process, by a
    campaign or a job submission's check)."""
    value = os.environ.get(KV_CACHE_ENV) or OmegaConf.load(CPU_BACKEND).hydra.job.env_set[KV_CACHE_ENV]
    return float(value)


def memory_lines(est: MemoryEstimate, shape: RunShape, available: float, total: float) -> tuple[str, str | None]:
    """The plan's memory line, and a warning when the run would pass what Ray's memory monitor lets it use (what is
    available now less the 5% of the machine the monitor keeps), naming the settings that would bring it under."""
    room = available - (1 - RAY_KILL_FRACTION) * total
    line = f"{est.render()}; {available:.1f} GiB available now"
    if est.total_gib <= room:
        return line, None
    arr = "actor_rollout_ref"
    levers = []
    if shape.update_rows > 1 and est.update_gib >= est.log_prob_gib:  # the update's activations are the largest
        half = shape.update_rows // 2
        saved = est.total_gib - estimate(replace(shape, update_rows=half)).total_gib
        levers.append(f"{arr}.actor.ppo_micro_batch_size_per_gpu={half} (-{saved:.1f} GiB; the same update)")
    elif shape.log_prob_rows > 1:  # the log-prob pass's logits are
        half = shape.log_prob_rows // 2
        saved = est.total_gib - estimate(replace(shape, log_prob_rows=half)).total_gib
        keys = " and ".join(f"{arr}.{role}.log_prob_micro_batch_size_per_gpu" for role in ("rollout", "ref"))
        levers.append(f"{keys}={half} (-{saved:.1f} GiB; the same log-probs)")
    if shape.kv_cache_gib > 1:
        levers.append(f"{KV_CACHE_ENV}=1 (-{shape.kv_cache_gib - 1:.1f} GiB of KV cache)")
    if not shape.checkpointing:
        saved = est.total_gib - estimate(replace(shape, checkpointing=True)).total_gib
        levers.append(f"{arr}.model.enable_gradient_checkpointing=true (-{saved:.1f} GiB; slower backward passes)")
    warning = (
        f"WARNING: this run may not fit this machine: its estimated peak {est.total_gib:.1f} GiB is over the "
        f"{room:.1f} GiB Ray's memory monitor lets it use ({available:.1f} GiB available now, less "
        f"{1 - RAY_KILL_FRACTION:.0%} of the machine's {total:.1f} GiB), so a worker may be killed part-way. "
        f"To bring it under: {'; '.join(levers)}; or stop what else holds memory here"
    )
    return line, warning
