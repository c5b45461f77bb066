"""The Composer on a real model against a real teacher, end to end on the test backend, in one vLLM teacher start-up:

1. The teacher launcher (`scripts/serve_teachers.py --model released -- COMMAND`, as a campaign runs under it)
   starts vLLM's OpenAI server on SmolLM2-135M-Instruct as released and, once it answers, runs the command with the
   teachers in its environment (`${served_teachers:}`'s variable), the same list it writes with --write.
2. The launcher's real-server checks, through the Composer's TeacherPool unchanged: real answers, the cache answers a
   restart without a call, the call cap stops the requests beyond it, real timeouts are retried, a 404 for an
   unknown model is not.
3. The full arm (GRPO + full-logit SDPO + trace replay) trains 2 steps of the real preset (preset/real.yaml: the same
   model as student, the arithmetic task; 4 responses a prompt) against three teachers: two on that one server (the
   released model under two pool names, so `min_agree: 2` can pair) and a lone dissenter on a scripted server on
   127.0.0.1 that needs an API key. Step 1's prompts go to the teachers, the last step waits for their answers,
   builds pairs from the two that agree (never the dissenter's answer) and trains on them; the channel losses add up
   to the logged total, and the key reaches the scripted server as a bearer token but no file of the run, its
   checkpoint included.
4. The same arm on the real agent (preset/agent_real.yaml: the Agents SDK calculator agent, unchanged, through the
   gateway), 2 steps against the same teachers: the server runs the agent's line tool template and is asked with
   tool_choice none (`--chat-template line_tool_template --tool-choice none`: plain chats render as the released
   template does, so part 3 is unchanged), every teacher request is the agent's turn with its tools; error sites come
   from the calculator's rules on the recorded tool results (`+tool_errors=calculator` in the preset), the hint-
   conditioned teacher pass gives SDPO a loss there, and the teachers' answers to the agent's turns make replay pairs
   written in the agent's call format. What only the real model shows of the agent itself: its own replies call the
   tool in the line format, the SDK runs the tool and sends the result back, each trained sample is, token for
   token, the line template's rendering of the conversation the gateway saw (`external_agent.transcripts`), and a
   greedy validation through the same agent reports its tool use.
5. The launcher is killed with SIGKILL (the hardest case: no clean-up of its own runs): its server, its engine and
   the command it ran are gone, and the port is free.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from tests.composer.conftest import ScriptedChatServer, alive, descendants, port_free
from tests.conftest import e2e_config, run_task_runner
from verl_ext.composer.teacher_pool import TeacherConfig, TeacherPool, TeacherPoolConfig, TeacherRequest
from verl_ext.composer.teacher_servers import env as teacher_env
from verl_ext.composer.teacher_servers import settings as ts
from verl_ext.metrics_log import read_jsonl

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[3]
STEPS, PROMPTS = 2, 2
# responses a prompt in the single-turn arm (the preset's 8 would double its update and generation, ~50 s): 8 rollout
# rows, one mini-batch and one micro-batch; the released model fails nearly every answer, so every step still has
# error sites (16 of 16 at 8 a prompt)
N_SINGLE = 4
SECRET = "sk-composer-e2e-7f3a9c"  # the lone teacher's key: must reach its server and never a file
KEY_ENV = "COMPOSER_E2E_KEY"


class LoneTeacher(ScriptedChatServer):
    """A teacher that answers every question with the same non-number, so it never agrees with the others; the
    request bodies kept."""

    bodies: list

    def respond(self, body, n):
        self.bodies = getattr(self, "bodies", [])
        self.bodies.append(body)
        text = "The answer is \\boxed{wrong}"
        completion = {
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
            "usage": {"total_tokens": 20},
        }
        return 200, json.dumps(completion).encode(), {"Content-Type": "application/json"}


def _pool(teachers, cache_path, **changes) -> TeacherPool:
    """A pool at the recipe's settings (composer.yaml), with `changes`."""
    from recipe.composer.config_check import COMPOSER_YAML

    recipe = OmegaConf.to_container(OmegaConf.load(COMPOSER_YAML).composer.replay.teacher_pool)
    settings = {k: v for k, v in recipe.items() if k not in ("teachers", "cache_path")}
    return TeacherPool(TeacherPoolConfig(teachers=teachers, cache_path=cache_path, **{**settings, **changes}))


def _start_launcher(tmp_path: Path) -> tuple[subprocess.Popen, list[dict], Path]:
    """The launcher running a command that writes the teachers it was given and waits; the teachers, once there."""
    seen, block = tmp_path / "command_env.json", tmp_path / "teachers.yaml"
    var = teacher_env.TEACHERS_ENV
    hold = f"import os, time; open({str(seen)!r}, 'w').write(os.environ[{var!r}]); time.sleep(3600)"
    cmd = [sys.executable, str(ROOT / "scripts/serve_teachers.py"), "--model", "released", "--max-tokens", "64"]
    cmd += ["--chat-template", "line_tool_template", "--tool-choice", "none"]  # for the agent's turns (part 4)
    cmd += ["--log-dir", str(tmp_path / "logs"), "--write", str(block), "--", sys.executable, "-c", hold]
    with open(tmp_path / "launcher.log", "wb") as log:
        launcher = subprocess.Popen(
            cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log, stderr=subprocess.STDOUT
        )
    start = time.monotonic()
    while not (seen.exists() and seen.read_text()):
        assert launcher.poll() is None, (tmp_path / "launcher.log").read_text()[-3000:]
        assert time.monotonic() - start < 1200, "no teacher ready after 20 minutes"
        time.sleep(1)
    print(f"teacher ready after {time.monotonic() - start:.0f} s")
    entries = teacher_env.served_teachers({teacher_env.TEACHERS_ENV: seen.read_text()})
    # the command got what the launcher printed and wrote
    assert entries == yaml.safe_load(block.read_text())["composer"]["replay"]["teacher_pool"]["teachers"]
    return launcher, entries, block


def _check_the_pool_against_the_real_server(teacher: TeacherConfig, tmp_path: Path) -> None:
    question = [{"role": "user", "content": "What is 2 + 3? Give the final answer in \\boxed{}."}]
    requests = [TeacherRequest("t", step, question) for step in range(2)]
    cache = tmp_path / "cache.jsonl"

    with _pool([teacher], str(cache)) as pool:
        answers = pool.query_many(requests)
        stats = pool.stats()
    assert all(a["released"] is not None and a["released"].text for a in answers)
    assert stats["calls"] == stats["successes"] == 2 and stats["failures"] == {}
    assert stats["missing_usage"] == 0 and stats["tokens"] == sum(a["released"].tokens for a in answers) > 0
    assert len(cache.read_text().splitlines()) == 2

    with _pool([teacher], str(cache), max_calls=1) as pool:  # the cache answers both: no call, cap untouched
        again = pool.query_many(requests)
        assert [a["released"].text for a in again] == [a["released"].text for a in answers]
        assert all(a["released"].cached for a in again) and pool.stats()["calls"] == 0
        fresh = [TeacherRequest("u", step, question) for step in range(3)]
        capped = pool.query_many(fresh)  # one call allowed: one answer, then the cap stops the rest
        stats = pool.stats()
    assert sum(a["released"] is not None for a in capped) == 1
    assert stats["calls"] == 1 and stats["budget_exhausted"] and stats["failures"] == {"budget": 2}

    too_fast = TeacherConfig(**{**vars(teacher), "timeout_s": 0.001})
    unknown = TeacherConfig(**{**vars(teacher), "name": "unknown", "model": "no-such-model"})
    with _pool([too_fast, unknown], None, max_retries=2, backoff_base_s=0.01, backoff_max_s=0.05) as pool:
        got = pool.query(TeacherRequest("v", 0, question))
        stats = pool.stats()
    assert got == {"released": None, "unknown": None}
    assert stats["attempt_errors"] == {"timeout": 3, "http_4xx": 1} and stats["retries"] == 2
    assert stats["failures"] == {"timeout": 1, "http_4xx": 1}


def _train_full_arm(teachers: list[dict], out: Path) -> tuple[list[dict], float, float]:
    """The rows of the run's metrics log and the run's channel weights (alpha_sdpo, beta_replay)."""
    cfg = e2e_config(
        "composer",
        [
            "+preset=real",
            "+arm=full",
            ts.render_override(teachers).strip("'"),  # the launcher's override line, as the shell passes it
            f"data.train_batch_size={PROMPTS}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS}",
            f"actor_rollout_ref.rollout.n={N_SINGLE}",
            # the log-prob passes in whole groups (the shared-prefix engine's micro-batches): 2 groups of 4
            f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={PROMPTS * N_SINGLE}",
            f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={PROMPTS * N_SINGLE}",
            "composer.replay.max_pairs_per_step=4",
            f"trainer.total_training_steps={STEPS}",
            "trainer.val_before_train=false",
            "trainer.heldout.files=null",  # 1,024 more greedy answers: the tiny fast DAPO run tests it
            "trainer.test_freq=-1",
            f"trainer.save_freq={STEPS}",  # the secret must not reach the checkpoint either
            "trainer.logger=[console]",
            f"trainer.default_local_dir={out}",
        ],
        config_module="recipe.composer.config",
    )
    from recipe.composer.main import check  # importing the driver registers its presets' resolvers
    from verl_ext.trainer.task_runner import ExtTaskRunner

    check(cfg)  # as the driver does before Ray: the pre-flight, resolving the config and filling composer.yaml's keys
    run_task_runner(ExtTaskRunner, cfg, env={KEY_ENV: SECRET}, timeout=1200)
    return read_jsonl(out / "metrics.jsonl"), cfg.algorithm.alpha_sdpo, cfg.composer.beta_replay


def _train_agent_full_arm(teachers: list[dict], out: Path) -> list[dict]:
    """The full arm on the real agent, 2 steps (step 1 asks the teachers about the agent's turns, step 2 trains on
    the pairs their answers make); the rows of its metrics log."""
    cfg = e2e_config(
        "composer",
        [
            "+preset=agent_real",
            "+arm=full",
            ts.render_override(teachers).strip("'"),
            f"data.train_batch_size={PROMPTS}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS}",
            "composer.replay.max_pairs_per_step=2",  # 4 rows more in step 2's update (~12 s at its micro-batches)
            # as the agent Composer campaign: the full-logit SDPO term's update in 2-row micro-batches (the same update;
            # at the preset's 8 this run was killed by Ray's memory monitor in a full `make test`, docs/FAULTS.md)
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
            "data.seed=0",
            f"trainer.total_training_steps={STEPS}",
            "trainer.val_before_train=false",
            "trainer.heldout.files=null",
            f"trainer.test_freq={STEPS}",  # a greedy validation of 4 questions through the agent, at the end
            "data.val_max_samples=4",
            "trainer.save_freq=-1",
            "trainer.logger=[console]",
            "trainer.plot_keys=[]",
            f"trainer.default_local_dir={out}",
        ],
        config_module="recipe.composer.config",
    )
    from recipe.composer.main import check
    from verl_ext.trainer.task_runner import ExtTaskRunner

    check(cfg)
    run_task_runner(ExtTaskRunner, cfg, env={KEY_ENV: SECRET}, timeout=1800)
    return read_jsonl(out / "metrics.jsonl")


def _check_the_agent_run(rows: list[dict], out: Path, lone: LoneTeacher) -> None:
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    first, last = rows[0], rows[-1]
    assert all(r["agent/ok"] == r["agent/episodes"] > 0 for r in rows), rows
    # error sites from the calculator's rules on the recorded conversations, and the hinted teacher pass's loss
    rule_sites = sum(v for r in rows for k, v in r.items() if k.startswith("sdpo/sites/"))
    assert rule_sites > 0 and sum(r["sdpo/error_sites"] for r in rows) >= rule_sites, rows
    assert all(r["loss/sdpo"] > 0 for r in rows if r["sdpo/error_sites"] > 0)
    assert all(0 <= r["sdpo/failed_covered_frac"] <= 1 for r in rows)
    # the sites found in the batch (logged in every arm) hold the rules' and every site the teacher pass hinted at
    for r in rows:
        by_rule = sum(v for k, v in r.items() if k.startswith("sdpo/sites/"))
        assert r["sdpo/sites_found"] >= max(by_rule, r["sdpo/error_sites"]), r
    # the teachers were asked about the agent's turns, with its tools and tool_choice none
    agent_bodies = [b for b in lone.bodies if b.get("tools")]
    assert agent_bodies and all(b["tool_choice"] == "none" for b in agent_bodies)
    assert all(b["tools"][0]["function"]["name"] == "calc" for b in agent_bodies)
    assert first["replay/pairs_used"] == 0 and last["teacher/pending_queries"] == 0
    assert last["replay/pairs_built_total"] > 0 and last["replay/pairs_used"] > 0 and last["loss/replay_dpo"] > 0
    pairs = [json.loads(line) for line in (out / "replay_pairs.jsonl").read_text().splitlines()]
    assert pairs and all(p["teachers"] == ["released", "released_b"] for p in pairs)
    for p in pairs:
        assert "turn" in p["prompt"] and p["chosen"] != p["rejected"] and "wrong" not in p["chosen"]
        # an action in the agent's format: a call line, or a final answer
        assert p["chosen"].startswith("calc: ") or "\\boxed" in p["chosen"], p
    # the model's own replies called the tool in the line format, and the SDK's next request extended the episode
    assert sum(r["agent/tool_call_frac"] for r in rows) > 0 and sum(r["agent/drift/extended"] for r in rows) > 0, rows
    assert all(r[k] == 0 for r in rows for k in r if k.startswith("agent/drift/split/")), rows
    # the validation ran through the same agent (greedy) and reports its tool use beside its accuracy, per module
    for name in ("acc", "tool_call", "tool_result_in_answer"):
        keys = [k for k in last if k.startswith("val-") and k.endswith(f"/{name}/mean@1")]
        assert keys and all(0 <= last[k] <= 1 for k in keys), name
    _check_the_transcripts(out / "transcripts", episodes=sum(r["agent/episodes"] for r in rows) + 4)


def _check_the_transcripts(transcripts: Path, episodes: int) -> None:
    """Each trained sample is, token for token, the line template's rendering of the conversation the gateway saw
    (the call line and the `Result:` turn included); the policy's call line is trained, the tool's result is not."""
    from transformers import AutoTokenizer

    from verl_ext.agent.gateway.toolcall import for_template
    from verl_ext.pretrained import smollm2

    tok = AutoTokenizer.from_pretrained(smollm2.ensure_smollm2())
    tok.chat_template = smollm2.LINE_TOOL_CHAT_TEMPLATE
    records = [json.loads(p.read_text()) for p in transcripts.glob("*.json")]
    assert len(records) == episodes  # the training episodes and the 4 validation ones
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
            call = calls[0]["tool_calls"][0]["function"]
            line = "calc: " + json.loads(call["arguments"])["expr"]
            assert f"{line}<|im_end|>\n<|im_start|>user\nResult: " in tok.decode(got)
            sampled = tok.decode([t for t, m in zip(r["response_ids"], r["response_mask"]) if m])
            context = tok.decode([t for t, m in zip(r["response_ids"], r["response_mask"]) if not m])
            assert line in sampled and "Result: " in context
    assert with_call > 0


def test_composer_full_arm_on_smollm2_against_a_real_teacher(ray_cpu, tmp_path):
    start = time.monotonic()
    launcher, entries, _ = _start_launcher(tmp_path)
    lone = LoneTeacher()
    try:
        assert [e["name"] for e in entries] == ["released"] and entries[0]["max_tokens"] == 64
        port = int(entries[0]["base_url"].rsplit(":", 1)[1].split("/")[0])
        processes = descendants(launcher.pid)  # the server, its engine and the command
        assert len(processes) >= 3 and not port_free(port)
        _check_the_pool_against_the_real_server(TeacherConfig(**entries[0]), tmp_path)
        teachers = [
            entries[0],
            {**entries[0], "name": "released_b"},  # one server, two pool names
            {**entries[0], "name": "lone", "base_url": lone.base_url, "model": "lone", "api_key_env": KEY_ENV},
        ]
        rows, alpha, beta = _train_full_arm(teachers, tmp_path / "run")
        agent_rows = _train_agent_full_arm(teachers, tmp_path / "agent_run")
    finally:
        lone.close()
        launcher.kill()
        launcher.wait()
    deadline = time.monotonic() + 60
    while (alive(processes) or not port_free(port)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert alive(processes) == [] and port_free(port), "a process or the port outlived the killed launcher"

    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    first, last = rows[0], rows[-1]
    for r in rows:
        for key in ("loss/grpo", "loss/sdpo", "loss/total", "actor/pg_loss", "sdpo/sibling_site_frac"):
            assert math.isfinite(r[key]), (r["step"], key, r.get(key))
        # the released model fails most questions: error sites every step, and the hint moves its distribution
        assert r["sdpo/error_sites"] > 0 and r["loss/sdpo"] > 0, r
        assert r["teacher/failures"] == 0
        assert r["loss/total"] == pytest.approx(r["loss/grpo"] + alpha * r["loss/sdpo"] + beta * r["loss/replay_dpo"])
    # step 1 asks the teachers (2 prompts x 3 teachers); the last step asks nothing and waits for those answers
    assert first["replay/pairs_used"] == 0 and first["teacher/pending_queries"] == 1
    assert last["teacher/calls"] == PROMPTS * 3 and last["teacher/tokens"] > 0 and last["teacher/pending_queries"] == 0
    assert last["teacher/queries_answered"] == PROMPTS
    # one model at temperature 0 under two names: the same answers, but for numerical noise between the batches the
    # server happened to run them in
    assert last["teacher/agreement"] > 0
    assert last["replay/pairs_built"] == last["replay/pairs_built_total"] > 0
    assert 0 < last["replay/pairs_used"] <= 4 and math.isfinite(last["loss/replay_dpo"]) and last["loss/replay_dpo"] > 0
    assert last["replay/dpo_loss_update"] == pytest.approx(last["loss/replay_dpo"], rel=0.05)
    assert "replay/dpo_loss_update" not in first
    # the rollout rows = 1 mini-batch, plus the replay mini-batch whose advantages are 0: loss/grpo leaves it out
    assert first["loss/grpo"] == pytest.approx(first["actor/pg_loss"])
    assert last["loss/grpo"] == pytest.approx(2 * last["actor/pg_loss"])

    # the pairs: built from the real teachers' answers, as the run's teacher cache holds them
    pairs = [json.loads(line) for line in (tmp_path / "run" / "replay_pairs.jsonl").read_text().splitlines()]
    cached = [json.loads(line) for line in (tmp_path / "run" / "teacher_cache.jsonl").read_text().splitlines()]
    served = {(c["trace_id"], c["teacher"]): c["text"] for c in cached}
    assert len(pairs) == last["replay/pairs_built"] and len(cached) == PROMPTS * 3
    for p in pairs:
        assert p["step"] == 1 and p["rule"] == "majority>=2" and p["teachers"] == ["released", "released_b"]
        assert p["answers"] == {name: served[(p["trace_id"], name)] for name in ("released", "released_b", "lone")}
        assert p["chosen"] == p["answers"]["released"] and p["chosen"] != p["rejected"]
        assert "wrong" not in p["chosen"]  # the lone teacher's answer is never chosen
    # the key reached the lone teacher as a bearer token, and no file of the run holds it (logs, config, cache,
    # pairs, the checkpoint's small files; its weight shards hold tensors only)
    assert lone.auth_headers and set(lone.auth_headers) == {f"Bearer {SECRET}"}
    assert list((tmp_path / "run").glob(f"global_step_{STEPS}"))
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.stat().st_size < 50_000_000:
            assert SECRET.encode() not in path.read_bytes(), path
    _check_the_agent_run(agent_rows, tmp_path / "agent_run", lone)
    print(json.dumps({"wall_s": round(time.monotonic() - start, 1), "pairs": len(pairs)}))
