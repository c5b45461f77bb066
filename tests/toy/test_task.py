"""The toy task: its data, its reward, its exact constant-answer baseline, and the headroom the warmed-up tiny model
leaves for RL (checked on the real tiny model, greedy and sampled, with transformers' generate)."""

import re
from collections import Counter

import pandas as pd
import pytest

from verl_ext.toy import task


def test_constant_answer_baseline_is_the_most_frequent_truth(tmp_path):
    path = tmp_path / "val.parquet"
    task.write_dataset(path, size=57, seed=3, split="val")
    truths = [r["ground_truth"] for r in pd.read_parquet(path)["reward_model"]]
    counts = Counter(truths)
    top = max(counts.values())
    answer, acc = task.constant_answer_baseline(path)
    assert acc == top / 57 and counts[answer] == top
    assert answer == min(d for d, c in counts.items() if c == top)
    # No constant does better: score every digit as the constant answer with the task's own reward.
    for d in range(task.NUM_DIGITS):
        got = sum(task.compute_score("x", task.answer_text(d), t)["acc"] for t in truths) / 57
        assert got <= acc


def test_data_is_uniform_over_digits_and_prompts_hold_their_digit(tmp_path):
    path = tmp_path / "train.parquet"
    task.write_dataset(path, size=2000, seed=0, split="train")
    df = pd.read_parquet(path)
    counts = Counter(r["ground_truth"] for r in df["reward_model"])
    assert set(counts) == {str(d) for d in range(10)}
    assert max(counts.values()) / 2000 < 0.13  # uniform: 0.1 each, well within sampling noise
    for prompt, r in zip(df["prompt"][:50], df["reward_model"][:50], strict=True):
        assert re.findall(r"\d", prompt[0]["content"]) == [r["ground_truth"]]


@pytest.mark.parametrize("profile", sorted(task.WARMUP_PROFILES))
def test_warmup_mixes_the_right_digit_with_the_off_by_one_mistake_at_the_stated_rates(profile):
    examples = task.warmup_examples(seed=0, size=20000, profile=profile)
    right, total = Counter(), Counter()
    for prompt, answer in examples:
        d = int(re.search(r"\d", prompt).group())
        shown = int(re.search(r"\\boxed\{(\d+)\}", answer).group(1))
        assert shown in (d, (d + 1) % 10)
        total[d] += 1
        right[d] += shown == d
    for d in range(10):
        assert right[d] / total[d] == pytest.approx(task.WARMUP_PROFILES[profile][d], abs=0.04)
    clean = task.warmup_examples(seed=0, size=500, mistakes=False)
    assert all(re.search(r"\d", p).group() == re.search(r"\\boxed\{(\d+)\}", a).group(1) for p, a in clean)


def test_heavy_tail_profile_has_the_advertised_shape_and_unknown_profiles_are_refused():
    rates = task.WARMUP_PROFILES["heavy_tail"]
    assert sum(r == 1.0 for r in rates) == 2 and sum(r == 0.0 for r in rates) == 5  # a fifth right, half wrong
    assert all(0 < r < 0.5 for r in rates if r not in (0.0, 1.0))  # the rest mixed and low
    with pytest.raises(ValueError, match="heavy_tail"):
        task.warmup_examples(seed=0, profile="steep")


def test_reward():
    assert task.compute_score("x", "so \\boxed{3}", "3") == {"score": 1.0, "acc": 1.0}
    assert task.compute_score("x", "\\boxed{3} no, \\boxed{4}", "3")["acc"] == 0.0
    assert task.compute_score("x", "3", "3")["acc"] == 0.0  # the format is part of the task
    assert task.compute_score("x", None, "3")["acc"] == 0.0


def test_warmed_up_model_leaves_headroom(tiny_assets):
    """The starting point of every CPU run: the answer format is learned, the copy only partly. Greedy accuracy is
    above the constant baseline but far from 1, and sampled answers are right for some prompts and wrong for others,
    so RL (and the curriculum's filter) has signal."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_assets.model_dir, padding_side="left")
    lm = AutoModelForCausalLM.from_pretrained(tiny_assets.model_dir).eval()
    df = pd.read_parquet(tiny_assets.val_file)
    truths = [r["ground_truth"] for r in df["reward_model"]]
    texts = [tok.apply_chat_template(list(p), add_generation_prompt=True, tokenize=False) for p in df["prompt"]]
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)

    def accuracy(sample: bool, repeat: int) -> tuple[float, list[str]]:
        torch.manual_seed(0)
        ids = {k: v.repeat_interleave(repeat, 0) for k, v in enc.items()}
        with torch.no_grad():
            out = lm.generate(
                **ids,
                max_new_tokens=16,
                do_sample=sample,
                top_k=0 if sample else None,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
            )
        answers = tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        gts = [t for t in truths for _ in range(repeat)]
        return sum(task.compute_score("x", a, t)["acc"] for a, t in zip(answers, gts, strict=True)) / len(gts), answers

    _, baseline = task.constant_answer_baseline(tiny_assets.val_file)
    greedy, answers = accuracy(sample=False, repeat=1)
    formatted = sum(bool(re.fullmatch(r"\\boxed\{\d\}", a.strip())) for a in answers) / len(answers)
    sampled, _ = accuracy(sample=True, repeat=4)
    print(f"greedy {greedy:.3f} sampled {sampled:.3f} formatted {formatted:.3f} baseline {baseline:.3f}")
    assert formatted > 0.9, answers[:5]
    assert baseline < 0.2
    assert 0.05 < sampled < 0.7, sampled
    assert greedy < 0.75, greedy  # room to learn
    # It reads the prompt: a model that answers one constant digit (what a warm-up on other token ids than the
    # run-time tokenizer's gave) has no signal to learn from.
    assert len(set(answers)) >= 5, Counter(answers)
