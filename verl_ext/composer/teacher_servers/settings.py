"""What the teacher launcher is told and what it prints: how each server runs (`ServeSettings`), the teachers to serve
(`--model` values as `TeacherSpec`s, checked before anything starts), and the `composer.replay.teacher_pool.teachers`
block that points the Composer at them. Nothing here starts a process, imports the process machinery or fetches a
model: the released model's directory comes from the caller (`parse_model_arg`'s `resolve_released`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

import yaml

from verl_ext.config.fields import check_field, setting

RELEASED = "released"  # --model value for SmolLM2-135M-Instruct as released
POOL_KEY = "composer.replay.teacher_pool.teachers"  # where the rendered block goes in a Composer config
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def flag(field_name: str) -> str:
    """The command-line flag of a ServeSettings field: `kv_cache_mib` -> `--kv-cache-mib`."""
    return "--" + field_name.replace("_", "-")


@dataclass(frozen=True, kw_only=True)
class ServeSettings:
    """How each teacher server runs, and the pool settings printed with it (each field's help is its flag's). The
    defaults are the measured smallest configuration that serves SmolLM2-135M beside training on 2 cores
    (docs/ALGORITHMS.md section 6): float32, as this kind of CPU has no native bf16; a 256 MiB KV cache holds ~5.8k
    tokens of SmolLM2-135M in float32 (46 KB a token), five full-length requests; one thread leaves the other core to
    training; a CPU teacher generates a few tokens per second beside training, so the pool waits up to 300 s."""

    dtype: str | None = setting(None, help="vLLM compute dtype (default: the CPU backend's rollout dtype, float32)")
    max_model_len: int = setting(1024, gt=0, help="prompt + answer tokens per request")
    kv_cache_mib: int = setting(256, gt=0, help="KV cache per server, MiB")
    threads: int = setting(1, gt=0, help="OMP_NUM_THREADS of each server's engine")
    max_num_seqs: int = setting(8, gt=0, help="requests a server batches at once")
    startup_timeout_s: float = setting(900.0, gt=0, help="per server, until it answers")
    timeout_s: float = setting(300.0, gt=0, help="the teacher pool's per-request timeout, written into the block")
    max_tokens: int = setting(128, gt=0, help="the teacher pool's answer cap, written into the block")
    chat_template: str | None = setting(
        None,
        help="the servers' chat template: line_tool_template or tool_template (SmolLM2's tool templates), or a "
        "file (default: the model's own)",
    )
    tool_choice: Literal["none", "auto", "required"] | None = setting(
        None,
        help="the teachers' tool choice on an agent's turns, written into the block (none: answer in text, read in "
        "the policy's call format; the servers parse no tool calls)",
    )
    host: str = field(default="127.0.0.1", repr=False)

    def __post_init__(self):
        for f in fields(self):
            if f.name != "host":  # each value conformed and bounded, the error naming its flag
                object.__setattr__(self, f.name, check_field(ServeSettings, f, getattr(self, f.name), flag(f.name)))
        if self.chat_template is not None and chat_template_text(self.chat_template) is None:
            raise ValueError(
                f"--chat-template {self.chat_template!r}: not a template name "
                f"({', '.join(_template_names())}) or a file"
            )
        if self.max_tokens >= self.max_model_len:
            raise ValueError(f"--max-tokens ({self.max_tokens}) must be below --max-model-len ({self.max_model_len})")


def _template_names() -> list[str]:
    from verl_ext.pretrained.smollm2 import CHAT_TEMPLATES

    return sorted(CHAT_TEMPLATES)


def chat_template_text(value: str) -> str | None:
    """The template `--chat-template` names: one of smollm2's by name, or a file's text; None if neither."""
    from verl_ext.pretrained.smollm2 import CHAT_TEMPLATES

    if value in CHAT_TEMPLATES:
        return CHAT_TEMPLATES[value]
    path = Path(value).expanduser()
    return path.read_text() if path.is_file() else None


@dataclass(frozen=True)
class TeacherSpec:
    """One teacher: its name (the served model name and the pool's teacher name) and its Hugging Face directory."""

    name: str
    model_dir: Path


def parse_model_arg(value: str, resolve_released: Callable[[], Path]) -> TeacherSpec:
    """`released`, `DIR`, `NAME=released` or `NAME=DIR` -> a checked TeacherSpec. Raises ValueError naming --model
    before anything is started. The name defaults to `released` or the directory's name. `resolve_released` gives
    the released model's directory, called only for `released` (the command line hands in
    `verl_ext.pretrained.smollm2.ensure_smollm2`, which fetches it on first use)."""
    name, sep, target = value.partition("=")
    if not sep:
        name, target = "", value
    if not target:
        raise ValueError(f"--model {value!r}: give a model directory or {RELEASED!r}")
    if target == RELEASED:
        model_dir = Path(resolve_released())
        name = name or RELEASED
    else:
        model_dir = Path(target).expanduser().resolve()
        problem = model_dir_problem(model_dir)
        if problem:
            raise ValueError(f"--model {value!r}: {problem}")
        name = name or model_dir.name
    if not _NAME.match(name):
        raise ValueError(f"--model {value!r}: teacher name {name!r} must be letters, digits, '.', '_' or '-'")
    return TeacherSpec(name, model_dir)


def model_dir_problem(path: Path) -> str | None:
    """What keeps vLLM from serving `path` (None: a Hugging Face model directory with weights and a tokenizer)."""
    if not path.exists():
        return f"{path} does not exist"
    if not path.is_dir():
        return f"{path} is not a directory"
    if (path / "huggingface").is_dir() and any(path.glob("model_world_size_*_rank_*.pt")):
        return (
            f"{path} is a training checkpoint (FSDP shards), not a Hugging Face directory; export it first: "
            f"python -m verl_ext.pretrained.export --local-dir {path} --target-dir outputs/teachers/<name>"
        )
    if not (path / "config.json").is_file():
        return f"{path} has no config.json: not a Hugging Face model directory"
    if not (any(path.glob("*.safetensors")) or any(path.glob("pytorch_model*.bin"))):
        return f"{path} has no weights (*.safetensors or pytorch_model*.bin)"
    if not ((path / "tokenizer.json").is_file() or (path / "tokenizer_config.json").is_file()):
        return f"{path} has no tokenizer (tokenizer.json or tokenizer_config.json)"
    return None


def check_unique_names(specs: Sequence[TeacherSpec]) -> None:
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"--model: teacher names must be unique, {dupes} given twice; name them with NAME=DIR")


# -- the printed block -----------------------------------------------------------------------------------------------


def pool_entries(served: Sequence[tuple[str, str]], settings: ServeSettings) -> list[dict]:
    """(name, base_url) pairs -> TeacherConfig dicts: the served model name is the teacher's name; a local server
    needs no key."""
    return [
        {
            "name": name,
            "base_url": url,
            "model": name,
            "api_key_env": None,
            "timeout_s": float(settings.timeout_s),
            "max_tokens": settings.max_tokens,
            **({"tool_choice": settings.tool_choice} if settings.tool_choice is not None else {}),
        }
        for name, url in served
    ]


def render_block(entries: Sequence[dict]) -> str:
    """The teachers as YAML for a Composer config, with the same list as one Hydra override in a comment: the
    whole text is valid YAML, so it can be saved as a file or pasted."""
    block = {"composer": {"replay": {"teacher_pool": {"teachers": [dict(e) for e in entries]}}}}
    text = yaml.safe_dump(block, sort_keys=False, default_flow_style=None, width=1000)
    return (
        "# teachers for the Composer (recipe/composer/config/composer.yaml: composer.replay.teacher_pool)\n"
        + text
        + "# or as a Hydra override:\n# "
        + render_override(entries)
        + "\n"
    )


def render_override(entries: Sequence[dict]) -> str:
    """One shell-quoted Hydra override setting the pool's teacher list."""

    def value(v) -> str:
        if v is None:
            return "null"
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return repr(v)

    items = ",".join("{" + ",".join(f"{k}:{value(v)}" for k, v in e.items()) + "}" for e in entries)
    return f"'{POOL_KEY}=[{items}]'"
