"""The Composer recipe end to end on CPU: 2 steps of all three channels on the tiny model (full-logit SDPO through
the actor loss, DPO as an added loss term), with three teachers on a real OpenAI-compatible server on 127.0.0.1
(two answer the prompt's digit, one answers a wrong one)."""

from __future__ import annotations

import json
import math
import re

import pytest

from tests.composer.conftest import ScriptedChatServer
from tests.conftest import e2e_config, read_file_logger, run_task_runner, tiny_run_overrides

pytestmark = pytest.mark.e2e

SECRET = "sk-composer-e2e-7f3a9c"  # must reach the server and never a file


class DigitTeachers(ScriptedChatServer):
    """model "right": the digit of the prompt, boxed; model "wrong": always 9 (not a digit of the toy task)."""

    def respond(self, body, n):
        digit = re.search(r"\d", body["messages"][-1]["content"]).group()
        text = f"The answer is \\boxed{{{digit if body['model'] == 'right' else 9}}}"
        completion = {
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
            "usage": {"total_tokens": 20},
        }
        return 200, json.dumps(completion).encode(), {"Content-Type": "application/json"}


def test_composer_three_channels_two_steps(ray_cpu, tiny_assets, tmp_path):
    server = DigitTeachers()
    try:
        teachers = ",".join(
            f"{{name: {name}, base_url: '{server.base_url}', model: {model}, "
            "api_key_env: COMPOSER_E2E_KEY, timeout_s: 10}"
            for name, model in (("t1", "right"), ("t2", "right"), ("t3", "wrong"))
        )
        steps = 2
        cfg = e2e_config(
            "composer",
            tiny_run_overrides(tiny_assets, tmp_path, steps)
            + [
                "+arm=full",
                f"composer.replay.teacher_pool.teachers=[{teachers}]",
                "composer.replay.teacher_pool.backoff_base_s=0.1",
                "trainer.logger=[console,file]",
                f"trainer.save_freq={steps}",
            ],
            config_module="recipe.composer.config",
        )
        log = tmp_path / "metrics.jsonl"
        env = {"VERL_FILE_LOGGER_PATH": str(log), "COMPOSER_E2E_KEY": SECRET}
        from verl_ext.trainer.task_runner import ExtTaskRunner

        run_task_runner(ExtTaskRunner, cfg, env=env)
    finally:
        server.close()

    rows = read_file_logger(log)
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        m = r["data"]
        for key in ("loss/grpo", "loss/sdpo", "loss/replay_dpo", "loss/total", "actor/pg_loss"):
            assert math.isfinite(float(m[key])), (r["step"], key, m.get(key))
        assert m["sdpo/error_sites"] > 0 and m["sdpo/tokens"] > 0, m
        assert m["loss/sdpo"] > 0  # the JSD the actor's loss function computed at the site tokens
        expected = m["loss/grpo"] + 0.1 * m["loss/sdpo"] + 0.05 * m["loss/replay_dpo"]
        assert m["loss/total"] == pytest.approx(expected)
    first, second = rows[0]["data"], rows[1]["data"]
    assert first["replay/pairs_used"] == 0  # pairs are used at a later step than their rollout
    assert second["replay/pairs_used"] > 0 and second["loss/replay_dpo"] > 0
    # The actor's loss saw the same DPO loss as the scoring pass: the replay rows are the update's first mini-batch.
    assert second["replay/dpo_loss_update"] == pytest.approx(second["loss/replay_dpo"], rel=0.05)
    assert "replay/dpo_loss_update" not in first
    # 16 rollout rows = 1 mini-batch, plus the replay mini-batch whose advantages are 0: loss/grpo leaves it out.
    assert second["loss/grpo"] == pytest.approx(2 * second["actor/pg_loss"])
    assert first["loss/grpo"] == pytest.approx(first["actor/pg_loss"])
    assert second["teacher/calls"] >= 3 and second["teacher/failures"] == 0
    # Every pair's chosen answer is the two agreeing teachers' digit, never the lone teacher's 9.
    pairs = [json.loads(line) for line in (tmp_path / "ckpt" / "replay_pairs.jsonl").read_text().splitlines()]
    assert pairs and all(p["teachers"] == ["t1", "t2"] and "{9}" not in p["chosen"] for p in pairs)
    # The key reached the server as a bearer token and appears in no file of the run (logs, config, cache, pairs).
    assert server.auth_headers and set(server.auth_headers) == {f"Bearer {SECRET}"}
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.stat().st_size < 50_000_000:
            assert SECRET.encode() not in path.read_bytes(), path


def test_composer_sampled_token_sdpo_one_step(ray_cpu, tiny_assets, tmp_path):
    """The "Recipe B" form: the hint-conditioned teacher's sampled-token log-probs shape the advantages (no
    actor loss function is installed; no teacher pool: beta_replay = 0)."""
    cfg = e2e_config(
        "composer",
        tiny_run_overrides(tiny_assets, tmp_path, 1)
        + ["+arm=sdpo", "composer.sdpo.form=sampled_token", "trainer.logger=[console,file]"],
        config_module="recipe.composer.config",
    )
    log = tmp_path / "metrics.jsonl"
    from verl_ext.trainer.task_runner import ExtTaskRunner

    run_task_runner(ExtTaskRunner, cfg, env={"VERL_FILE_LOGGER_PATH": str(log)})
    (row,) = read_file_logger(log)
    m = row["data"]
    assert m["sdpo/error_sites"] > 0 and m["sdpo/tokens"] > 0
    # The sampled-token estimate of KL(student || teacher) is finite and non-zero: the hint changes the log-probs.
    assert math.isfinite(m["loss/sdpo"]) and m["loss/sdpo"] != 0
    assert m["loss/replay_dpo"] == 0 and "teacher/calls" not in m
    assert m["loss/total"] == pytest.approx(m["loss/grpo"] + 0.1 * m["loss/sdpo"])
