"""An agent written with a real framework trains a step on the real model through the gateway (preset agent_real):
the OpenAI Agents SDK calculator agent (verl_ext/agent/examples/agents_sdk_calc.py, unchanged) drives
SmolLM2-135M-Instruct as released, in the one-line tool-call format (`${smollm2:line_tool_template}`, the gateway's
`line` parser), on the generated arithmetic after a worked call exchange; one fast DAPO step through verl's vLLM and
FSDP on the test backend, then a greedy validation of 4 held-out questions through the same agent.

What only the real model shows: its own replies call the tool (at the preset's T 0.6 about half of them write a
well-formed `calc: ...` line, docs/AGENT_REAL_MODEL.md), the SDK runs the tool on the parsed arguments and sends the
result back, and each trained sample is, token for token, the line template's rendering of the conversation the
gateway saw (the call line and the `Result:` turn included; `external_agent.transcripts` holds both sides). The
curriculum's filter is off (`curriculum.enable=false`: every group trains, mixed or not), so the one step does not
wait on the released model's rare mixed groups.
"""

from __future__ import annotations

import json
import math

import pytest

from tests.conftest import e2e_config, run_task_runner
from verl_ext.metrics_log import read_jsonl

pytestmark = pytest.mark.e2e

# 2 tasks x 4 episodes (each a process of ~110 MB beside verl's workers): at the ~50% of sampled replies that call
# the tool (docs/AGENT_REAL_MODEL.md), all 8 without a call has probability ~0.4%
PROMPTS, N_SCREEN, N_CONTINUE = 2, 2, 2


def test_framework_agent_step_on_smollm2_through_the_gateway(ray_cpu, tmp_path):
    from transformers import AutoTokenizer

    from recipe.fast_dapo.config_check import prepare_config
    from verl_ext.agent.gateway.toolcall import for_template
    from verl_ext.pretrained import smollm2
    from verl_ext.trainer.launch import register_lazy_resolvers
    from verl_ext.trainer.task_runner import ExtTaskRunner

    register_lazy_resolvers()
    transcripts = tmp_path / "transcripts"
    cfg = e2e_config(
        "fast_dapo",
        [
            "+preset=agent_real",
            "curriculum.enable=false",
            f"data.train_batch_size={PROMPTS}",
            f"data.gen_batch_size={PROMPTS}",
            "data.val_max_samples=4",
            "data.seed=0",
            f"actor_rollout_ref.rollout.n={N_SCREEN}",
            f"actor_rollout_ref.rollout.n_continue={N_CONTINUE}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS}",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
            "trainer.total_training_steps=1",
            "trainer.test_freq=1",
            "trainer.save_freq=-1",
            "trainer.val_before_train=false",
            "trainer.heldout.files=null",  # 1,024 more greedy answers: the tiny fast DAPO run tests it
            "trainer.logger=[console]",
            "trainer.plot_keys=[]",
            f"trainer.default_local_dir={tmp_path / 'ckpt'}",
            f"++trainer.jsonl_metrics_path={tmp_path / 'metrics.jsonl'}",
            f"+external_agent.transcripts={transcripts}",
        ],
        config_module="recipe.fast_dapo.config",
    )
    prepare_config(cfg)
    run_task_runner(ExtTaskRunner, cfg, timeout=1800)
    (row,) = read_jsonl(tmp_path / "metrics.jsonl")
    episodes = PROMPTS * (N_SCREEN + N_CONTINUE)
    assert row["step"] == 1 and row["agent/episodes"] == episodes
    assert row["agent/ok"] == episodes, row  # every episode of the framework agent finished and posted its score
    assert math.isfinite(row["actor/grad_norm"])
    # the model's own replies called the tool in the line format, and the SDK's next request extended the episode
    assert row["agent/tool_call_frac"] > 0 and row["agent/drift/extended"] > 0, row
    assert all(row[k] == 0 for k in row if k.startswith("agent/drift/split/")), row
    # the validation ran through the same agent (greedy) and reports its tool use beside its accuracy, per module
    for name in ("acc", "tool_call", "tool_result_in_answer"):
        keys = [k for k in row if k.startswith("val-") and k.endswith(f"/{name}/mean@1")]
        assert keys and all(0 <= row[k] <= 1 for k in keys), name

    tok = AutoTokenizer.from_pretrained(smollm2.ensure_smollm2())
    tok.chat_template = smollm2.LINE_TOOL_CHAT_TEMPLATE
    records = [json.loads(p.read_text()) for p in transcripts.glob("*.json")]
    assert len(records) == episodes + 4  # the training episodes and the 4 validation ones
    with_call = 0
    for r in records:
        assert r["status"] == "ok" and r["tools"][0]["function"]["name"] == "calc", r
        messages = [for_template(m) for m in r["messages"]]
        want = tok.apply_chat_template(messages, tools=r["tools"], tokenize=True, return_dict=False)
        got = r["prompt_ids"] + r["response_ids"]
        # the trained ids are the template's rendering of the conversation; it ends with the reply's end of turn and
        # the template's newline (a reply cut by the token budget lacks its end of turn)
        assert got == want[: len(got)], (r["episode_id"], tok.decode(got), tok.decode(want))
        assert tok.decode(want[len(got) :]) in ("\n", "<|im_end|>\n"), tok.decode(want[len(got) :])
        calls = [m for m in r["messages"] if m.get("tool_calls")]
        if calls:
            with_call += 1
            assert r["rounds"] >= 2 and any(m["role"] == "tool" for m in r["messages"])
            text = tok.decode(got)
            call = calls[0]["tool_calls"][0]["function"]
            line = "calc: " + json.loads(call["arguments"])["expr"]
            assert f"{line}<|im_end|>\n<|im_start|>user\nResult: " in text
            # the policy's call line is trained (mask 1), the tool's result turn is context (mask 0)
            sampled = tok.decode([t for t, m in zip(r["response_ids"], r["response_mask"]) if m])
            context = tok.decode([t for t, m in zip(r["response_ids"], r["response_mask"]) if not m])
            assert line in sampled and "Result: " in context
    assert with_call > 0
