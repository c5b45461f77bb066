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


# Ray's memory monitor killing a run's workers, in the two message forms of Ray 2.4x-2.5x (built from the raylet's
# format strings: "Memory on the node (IP: %s, ID: %s) was %sGB used / %sGB limit (%f)" and per worker
# "(name=..., pid=%d, actual memory used=%sGB, worker ID=%s)"; the older one per task)
OOM_PER_TASK = (
    "ray::TaskRunner.run() (pid=1, ip=10.0.0.1)\n"
    "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
    "Memory on the node (IP: 10.0.0.1, ID: 6f2a) where the task (actor ID: 4e1, name=WorkerDict.__init__, "
    "pid=31081, memory used=9.80GB) was running was 22.60GB / 23.50GB (0.961702), which exceeds the memory usage "
    "threshold of 0.95. Ray killed this worker (ID: 9a) because it was the most recently scheduled task."
)
OOM_PER_NODE = (
    "ray.exceptions.OutOfMemoryError: 2 worker(s) were killed due to the node running low on memory. Memory on the "
    "node (IP: 10.0.0.1, ID: 6f2a) was 22.6GB used / 23.5GB limit (0.961702)\n"
    " (name=WorkerDict, pid=31081, actual memory used=9.8GB, worker ID=ab)\n"
    " (pid=31235, actual memory used=3.9GB, worker ID=cd)"
)


@pytest.mark.parametrize(
    "text, named",
    [
        (OOM_PER_TASK, "WorkerDict.__init__ (pid 31081, 9.8 GB) with the node at 22.6 of 23.5 GB"),
        (OOM_PER_NODE, "WorkerDict (pid 31081, 9.8 GB), a worker (pid 31235, 3.9 GB) with the node at 22.6 of 23.5 GB"),
        ("ray.exceptions.OutOfMemoryError: the node ran low on memory.", "workers of the run:"),
    ],
)
def test_an_oom_kill_names_the_workers_and_the_nodes_memory(text, named):
    from verl_ext.metrics_log.failure import failure_cause

    cause = failure_cause(RuntimeError(text))
    assert cause.startswith("OutOfMemoryError: Ray's memory monitor killed ") and named in cause, cause
    assert "\n" not in cause
    assert failure_cause(RuntimeError("Traceback (most recent call last):\nValueError: bad")) == "ValueError: bad"


def test_vllms_see_above_points_to_the_runs_log():
    from verl_ext.metrics_log.failure import failure_cause

    text = (
        "ray::TaskRunner.run()\n  File engine.py, line 9\nvllm.v1.engine.exceptions.EngineDeadError: EngineCore "
        "encountered an issue. See stack trace (above) for the root cause."
    )
    cause = failure_cause(RuntimeError(text))
    assert cause.startswith("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. ")
    assert cause.endswith("Its stack trace is in the run's log.") and "(above)" not in cause
