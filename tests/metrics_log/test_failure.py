"""What a failed run says (verl_ext/metrics_log/failure.py): the failure line, the resume point read from verl's
checkpoint tracker as verl's own resume reads it, and the step a failure came at."""

from __future__ import annotations

import os

import pytest

from verl_ext.metrics_log.failure import failed_line, latest_checkpoint, resume_line, step_of, where_after


def _checkpoint(run_dir, step, tracker=True):
    (run_dir / f"global_step_{step}").mkdir(parents=True)
    if tracker:
        (run_dir / "latest_checkpointed_iteration.txt").write_text(str(step))


def test_the_latest_checkpoint_is_the_one_verls_resume_loads(tmp_path):
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    assert latest_checkpoint(tmp_path) is None
    _checkpoint(tmp_path, 2)
    _checkpoint(tmp_path, 4, tracker=False)  # a checkpoint being written: the tracker still names step 2
    assert latest_checkpoint(tmp_path) == find_latest_ckpt_path(str(tmp_path)) == str(tmp_path / "global_step_2")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("6")  # names a folder that is gone
    assert latest_checkpoint(tmp_path) is None and find_latest_ckpt_path(str(tmp_path)) is None


def test_the_resume_line_says_where_the_same_command_starts_again(tmp_path):
    assert resume_line("auto", tmp_path) == "[verl_ext] no checkpoint yet: a resume starts from step 0"
    _checkpoint(tmp_path, 4)
    ckpt = os.path.join(tmp_path, "global_step_4")
    assert resume_line("auto", tmp_path) == f"[verl_ext] a resume (trainer.resume_mode=auto) starts from {ckpt}"
    assert resume_line("disable", tmp_path) == (
        "[verl_ext] resume is off (trainer.resume_mode=disable): a rerun starts from step 0"
        f" (latest checkpoint: {ckpt})"
    )
    assert resume_line("resume_path", tmp_path, "/ckpt/global_step_2") == (
        f"[verl_ext] a resume (trainer.resume_mode=resume_path) starts from /ckpt/global_step_2; the latest checkpoint"
        f" is {ckpt}"
    )


@pytest.mark.parametrize(
    "last, where",
    [(None, ""), ((0, 20), "at step 1/20"), ((4, 20), "at step 5/20"), ((20, 20), "after step 20/20")],
)
def test_a_failure_comes_at_the_step_after_the_last_step_line(last, where):
    assert where_after(last) == where


def test_step_lines_and_failure_lines():
    assert step_of("step  4/20 | reward 0.391 | 12.7 s") == (4, 20)
    assert step_of("step 0/20 | val acc 0.220") == (0, 20)
    assert step_of("[verl_ext] step 2: metrics row lost") is None
    assert (
        failed_line("EngineDeadError: gone", "at step 5/20")
        == "[verl_ext] run failed at step 5/20: EngineDeadError: gone"
    )
    assert failed_line("ValueError: x") == "[verl_ext] run failed: ValueError: x"


def test_a_failure_line_gives_back_its_cause_and_no_other_line_does():
    from verl_ext.metrics_log.failure import failed_cause, failed_line

    for where in ("", "at step 5/20", "before step 1/20", "after step 20/20"):
        assert failed_cause(failed_line("EngineDeadError: the engine core died", where)) == (
            "EngineDeadError: the engine core died"
        )
    assert failed_cause("[verl_ext] run failed: ValueError: x\n") == "ValueError: x"
    for other in ("step  5/20 | reward 0.5", "[verl_ext] a resume (trainer.resume_mode=auto) starts from x", ""):
        assert failed_cause(other) is None
