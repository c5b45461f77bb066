"""Extra rows for verl's actor/ref workers in verl's padded layout (Composer channels 2 and 3;
docs/ALGORITHMS.md section 6).

verl's legacy trainer scores a row as `input_ids = prompts ++ responses` where `prompts` is left-padded to P
columns and `responses` is right-padded to R columns; `attention_mask` marks real tokens, `position_ids` count them
(cumsum - 1, clipped at 0) and `response_mask` marks the response tokens that carry loss. verl's
`left_right_2_no_padding` / `no_padding_2_padding` then give log-probs of shape (B, R) aligned with `responses`.

`pack_rows` builds such rows from per-row prefix token lists (any lengths, e.g. prompt + hint for the SDPO teacher)
and per-row response token lists, so the extra rows go through the same worker calls as the rollout's own rows:
the SDPO teacher scores the student's tokens after a hint, and the trace-replay pairs get policy and reference
log-probs. Assumes at least one prefix token per row (a causal LM needs a token before the first response token).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def pack_rows(
    prefixes: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    pad_token_id: int,
    response_width: int | None = None,
    prefix_width: int | None = None,
) -> dict[str, torch.Tensor]:
    """Padded (prompts, responses, input_ids, attention_mask, position_ids, response_mask) for verl's workers.

    response_width / prefix_width: R and P, the column counts (default: the longest response / prefix); pass the
    batch's own widths to concatenate the rows with it. Every response and prefix must fit.
    """
    if len(prefixes) != len(responses):
        raise ValueError(f"{len(prefixes)} prefixes for {len(responses)} responses")
    if not prefixes:
        raise ValueError("pack_rows needs at least one row")
    if any(len(p) == 0 for p in prefixes):
        raise ValueError("every row needs at least one prefix token before its response")
    longest = max(len(r) for r in responses)
    width = longest if response_width is None else int(response_width)
    if longest > width:
        raise ValueError(f"a response has {longest} tokens, more than response_width={width}")
    if width < 1:
        raise ValueError("response_width must be >= 1")
    n, p_width = len(prefixes), max(len(p) for p in prefixes)
    if prefix_width is not None:
        if p_width > prefix_width:
            raise ValueError(f"a prefix has {p_width} tokens, more than prefix_width={prefix_width}")
        p_width = int(prefix_width)
    prompts = torch.full((n, p_width), pad_token_id, dtype=torch.long)
    prompt_mask = torch.zeros((n, p_width), dtype=torch.long)
    resp = torch.full((n, width), pad_token_id, dtype=torch.long)
    resp_mask = torch.zeros((n, width), dtype=torch.long)
    for i, (p, r) in enumerate(zip(prefixes, responses)):
        prompts[i, p_width - len(p) :] = torch.as_tensor(list(p), dtype=torch.long)  # left padding
        prompt_mask[i, p_width - len(p) :] = 1
        if len(r):
            resp[i, : len(r)] = torch.as_tensor(list(r), dtype=torch.long)  # right padding
            resp_mask[i, : len(r)] = 1
    attention_mask = torch.cat([prompt_mask, resp_mask], dim=1)
    position_ids = (torch.cumsum(attention_mask, dim=1) - 1).clamp(min=0)
    return {
        "prompts": prompts,
        "responses": resp,
        "input_ids": torch.cat([prompts, resp], dim=1),
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "response_mask": resp_mask,
    }


def valid_tokens(ids: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
    """Per row, the tokens of `ids` where `mask` is set (strips verl's left or right padding): (B, L) -> B lists."""
    if ids.shape != mask.shape:
        raise ValueError(f"ids {tuple(ids.shape)} and mask {tuple(mask.shape)} differ")
    keep = mask.bool()
    return [ids[i][keep[i]].tolist() for i in range(ids.shape[0])]


def prompt_response_tokens(
    prompts: torch.Tensor, responses: torch.Tensor, attention_mask: torch.Tensor
) -> tuple[list[list[int]], list[list[int]]]:
    """Per row of a verl batch, its prompt's and its response's tokens without padding (`valid_tokens` on each side
    of attention_mask, split at the prompt width)."""
    width = prompts.shape[1]
    return valid_tokens(prompts, attention_mask[:, :width]), valid_tokens(responses, attention_mask[:, width:])


def pad_rows(tensors: dict[str, torch.Tensor], multiple: int) -> dict[str, torch.Tensor]:
    """The rows padded to a multiple of `multiple` by repeating the last row (verl's dispatch splits a batch evenly
    over its workers, and its engine needs whole micro-batches); unchanged if already a multiple."""
    n = next(iter(tensors.values())).shape[0]
    pad = (-n) % multiple
    if not pad:
        return tensors
    return {k: torch.cat([v, v[-1:].expand(pad, *v.shape[1:])]) for k, v in tensors.items()}
