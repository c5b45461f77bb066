"""pack_rows / valid_tokens against plain loops and against verl's own padding conversions."""

from __future__ import annotations

import random

import pytest
import torch

from verl_ext.composer.rows import pack_rows, valid_tokens

PAD = 0


def _reference(prefixes, responses, p_width, r_width):
    """Row by row: left-pad the prefix, right-pad the response, count positions over real tokens."""
    out = {k: [] for k in ("prompts", "responses", "attention_mask", "position_ids", "response_mask")}
    for p, r in zip(prefixes, responses):
        prompt = [PAD] * (p_width - len(p)) + list(p)
        resp = list(r) + [PAD] * (r_width - len(r))
        attn = [0] * (p_width - len(p)) + [1] * len(p) + [1] * len(r) + [0] * (r_width - len(r))
        pos, count = [], 0
        for a in attn:
            pos.append(max(count - 1 + a, 0) if a else max(count - 1, 0))
            count += a
        out["prompts"].append(prompt)
        out["responses"].append(resp)
        out["attention_mask"].append(attn)
        out["position_ids"].append(pos)
        out["response_mask"].append([1] * len(r) + [0] * (r_width - len(r)))
    return {k: torch.tensor(v) for k, v in out.items()}


@pytest.mark.parametrize("seed", range(5))
def test_pack_rows_matches_reference(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 6)
    prefixes = [[rng.randint(1, 99) for _ in range(rng.randint(1, 7))] for _ in range(n)]
    responses = [[rng.randint(1, 99) for _ in range(rng.randint(0, 5))] for _ in range(n)]
    p_width = max(map(len, prefixes)) + rng.randint(0, 2)
    r_width = max(map(len, responses)) + rng.randint(1, 2)
    got = pack_rows(prefixes, responses, PAD, response_width=r_width, prefix_width=p_width)
    ref = _reference(prefixes, responses, p_width, r_width)
    for key, value in ref.items():
        assert torch.equal(got[key], value), key
    assert torch.equal(got["input_ids"], torch.cat([ref["prompts"], ref["responses"]], dim=1))
    assert valid_tokens(got["prompts"], got["attention_mask"][:, :p_width]) == prefixes
    assert valid_tokens(got["responses"], got["response_mask"]) == responses


def test_pack_rows_bad_input():
    with pytest.raises(ValueError, match="at least one prefix token"):
        pack_rows([[]], [[1]], PAD)
    with pytest.raises(ValueError, match="more than response_width"):
        pack_rows([[1]], [[1, 2, 3]], PAD, response_width=2)
    with pytest.raises(ValueError, match="more than prefix_width"):
        pack_rows([[1, 2, 3]], [[1]], PAD, prefix_width=2)
    with pytest.raises(ValueError, match="prefixes for"):
        pack_rows([[1]], [[1], [2]], PAD)


def test_verl_padding_round_trip_aligns_response_tokens():
    """Through verl's left_right_2_no_padding / no_padding_2_padding, output column j of a row comes from the
    model position just before response token j (a causal LM's prediction of it): checked with a per-position
    output equal to the NEXT input token, which must reproduce the responses exactly."""
    from verl import DataProto
    from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

    prefixes = [[5, 6, 7], [8], [9, 10]]
    responses = [[11, 12], [13, 14, 15], [16]]
    packed = pack_rows(prefixes, responses, PAD, response_width=4)
    td = left_right_2_no_padding(DataProto.from_dict(tensors=packed).to_tensordict())
    flat = td["input_ids"].values()
    next_token = torch.cat([flat[1:], flat[:1]]).float()  # position t "predicts" token t + 1
    out = no_padding_2_padding(next_token, td)
    assert out.shape == (3, 4)
    for i, r in enumerate(responses):
        assert out[i, : len(r)].tolist() == [float(x) for x in r]
        assert out[i, len(r) :].abs().sum() == 0


@pytest.mark.parametrize("n,multiple", [(1, 1), (3, 4), (4, 4), (5, 2), (7, 6)])
def test_pad_rows_repeats_the_last_row(n, multiple):
    from verl_ext.composer.rows import pad_rows

    tensors = {"a": torch.arange(n * 3).view(n, 3), "b": torch.arange(n)}
    out = pad_rows(tensors, multiple)
    total = n if n % multiple == 0 else n + multiple - n % multiple
    for key, value in tensors.items():
        rows = [value[i].tolist() for i in range(n)] + [value[n - 1].tolist()] * (total - n)
        assert [r.tolist() for r in out[key]] == rows


def test_prompt_response_tokens_split_at_the_prompt_width():
    from verl_ext.composer.rows import prompt_response_tokens

    prefixes, responses = [[5, 6, 7], [8]], [[11, 12], [13, 14, 15]]
    packed = pack_rows(prefixes, responses, PAD, response_width=4)
    assert prompt_response_tokens(packed["prompts"], packed["responses"], packed["attention_mask"]) == (
        prefixes,
        responses,
    )
