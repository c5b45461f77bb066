"""A random-init Qwen2 causal LM, optionally warmed up with a few SFT steps on the toy task's answer format."""

from __future__ import annotations

import json
from pathlib import Path


def build_model(spec, tok):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(spec.seed)
    vocab = max(spec.vocab_size, len(tok))
    cfg = Qwen2Config(
        vocab_size=vocab,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        max_position_embeddings=spec.max_position,
        tie_word_embeddings=True,
        bos_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        torch_dtype="float32",
    )
    return Qwen2ForCausalLM(cfg)


def warm_up(lm, tok, examples: list[tuple[str, str]], steps: int, seed: int, batch_size: int = 32, lr: float = 3e-3):
    """SFT on (chat prompt, answer) pairs; loss on answer tokens only. Seconds on CPU for the default spec."""
    import torch

    g = torch.Generator().manual_seed(seed)
    rows = []
    for prompt, answer in examples:
        p = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False)
        p_ids = tok(p, add_special_tokens=False)["input_ids"]
        a_ids = tok(answer + "<|im_end|>", add_special_tokens=False)["input_ids"]
        rows.append((p_ids + a_ids, [-100] * len(p_ids) + a_ids))
    opt = torch.optim.AdamW(lm.parameters(), lr=lr)
    lm.train()
    for _ in range(steps):
        idx = torch.randint(len(rows), (batch_size,), generator=g).tolist()
        width = max(len(rows[i][0]) for i in idx)
        ids = torch.full((batch_size, width), tok.pad_token_id)
        labels = torch.full((batch_size, width), -100)
        att = torch.zeros((batch_size, width), dtype=torch.long)
        for b, i in enumerate(idx):
            x, y = rows[i]
            ids[b, : len(x)] = torch.tensor(x)
            labels[b, : len(y)] = torch.tensor(y)
            att[b, : len(x)] = 1
        loss = lm(input_ids=ids, attention_mask=att, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    lm.eval()
    return float(loss.detach())


def save_generation_config(model_dir: Path, tok) -> None:
    cfg = {"eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id, "do_sample": True}
    (Path(model_dir) / "generation_config.json").write_text(json.dumps(cfg, indent=2))
