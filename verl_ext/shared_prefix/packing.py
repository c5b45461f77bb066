"""Shared-prefix packing: each distinct prompt of a micro-batch runs through the model once, every response against it.

PrefixGrouper (arXiv 2506.05433) for GRPO-style groups: the N rows of a group carry the same prompt, and the unshared
actor pass runs the forward and backward of that prompt N times. Here the rows of a micro-batch that begin with the
same prompt tokens are laid out as one *pack*

    [prompt, response_1, response_2, ..., response_k]      (packs right-padded to a common length L)

and the model runs on the packs with a 4-D attention mask and explicit positions such that

    token of response j attends to  {prompt tokens} U {tokens of response j at or before it}
    position of response j's t-th token = len(prompt) + t

so every response token sees exactly the keys, values and rotary positions it sees in its own row. Its logits are
therefore the row's (up to float summation order), and in the backward pass the gradient reaching the prompt's
activations is the sum over the pack's responses, which is what the N unshared rows contribute.

Outputs are handed back in the unshared layout: one value per token of every row (prompt and response, verl's
"no padding" nested layout), where row token t's value is computed from the pack position that holds it (the shared
prompt position for t < len(prompt), the row's own response position after), with the row's own label. The label
stream is the caller's (verl rolls the concatenated row tokens by one), so even the last position of each row matches.

Assumptions, checked by the caller before it packs (`verl_ext/shared_prefix/engine.py`): a row's positions are
0..len-1 (text models; 3-D rotary positions are left to the unshared pass), and rows in one pack share one sampling
temperature (the grouping key carries it). A group whose responses would make a pack longer than `max_pack_tokens`
is split into several packs, each with its own copy of the prompt: attention over a pack costs L^2, and on a long
group the masked-out response-to-response blocks would outgrow what the shared prompt saves.

Pure torch: no verl, no model; `tests/shared_prefix/` checks it against the obvious per-row loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PackPlan:
    """Where each row's tokens live in the packs.

    input_ids, position_ids, segment: (packs, L). segment is 0 on prompt tokens, j >= 1 on the pack's j-th response,
    -1 on padding. used_positions: (U,) flat pack positions (pack * L + position) that hold a real token, ascending.
    row_to_used: (total row tokens,) for each token of each row, in row order, the index into used_positions whose
    output is that token's. pack_of_row: (rows,). group_of_pack: (packs,) the grouping key's index of each pack.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    segment: torch.Tensor
    used_positions: torch.Tensor
    row_to_used: torch.Tensor
    pack_of_row: torch.Tensor
    group_of_pack: torch.Tensor

    @property
    def num_packs(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def pack_tokens(self) -> int:
        """Tokens the model runs on, padding excluded."""
        return int(self.used_positions.numel())

    @property
    def row_tokens(self) -> int:
        """Tokens the unshared pass runs on, padding excluded."""
        return int(self.row_to_used.numel())


def group_rows(rows: list[torch.Tensor], prompt_lens: list[int], extra_keys: list | None = None) -> list[list[int]]:
    """Row indices grouped by identical prompt tokens (and extra key), groups in order of first appearance."""
    groups: dict = {}
    for i, (row, plen) in enumerate(zip(rows, prompt_lens, strict=True)):
        key = (row[:plen].cpu().numpy().tobytes(), None if extra_keys is None else extra_keys[i])
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def plan_packs(
    rows: list[torch.Tensor],
    prompt_lens: list[int],
    extra_keys: list | None = None,
    max_pack_tokens: int | None = None,
    pad_token_id: int = 0,
) -> PackPlan:
    """Lay the rows (1-D token tensors, prompt then response, no padding) out as packs; see the module docstring."""
    if len(rows) != len(prompt_lens):
        raise ValueError(f"{len(rows)} rows but {len(prompt_lens)} prompt lengths")
    for i, (row, plen) in enumerate(zip(rows, prompt_lens, strict=True)):
        if not 0 < plen <= row.numel():
            raise ValueError(f"row {i}: prompt length {plen} outside 1..{row.numel()}")
    groups = group_rows(rows, prompt_lens, extra_keys)

    # packs: (group index, prompt tokens, [(row, response tokens, offset in pack)])
    packs: list[tuple[int, torch.Tensor, list[tuple[int, int]]]] = []
    for g, members in enumerate(groups):
        plen = prompt_lens[members[0]]
        prompt = rows[members[0]][:plen]
        current: list[tuple[int, int]] = []
        length = plen
        for i in members:
            rlen = rows[i].numel() - plen
            if current and max_pack_tokens is not None and length + rlen > max_pack_tokens:
                packs.append((g, prompt, current))
                current, length = [], plen
            current.append((i, length))
            length += rlen
        packs.append((g, prompt, current))

    lengths = [p.numel() + sum(rows[i].numel() - p.numel() for i, _ in members) for _, p, members in packs]
    width = max(lengths)
    n = len(packs)
    device = rows[0].device
    input_ids = torch.full((n, width), pad_token_id, dtype=rows[0].dtype, device=device)
    position_ids = torch.zeros((n, width), dtype=torch.long, device=device)
    segment = torch.full((n, width), -1, dtype=torch.long, device=device)
    pack_of_row = torch.empty(len(rows), dtype=torch.long)
    group_of_pack = torch.empty(n, dtype=torch.long)
    row_positions: list[torch.Tensor | None] = [None] * len(rows)
    for b, (g, prompt, members) in enumerate(packs):
        plen = prompt.numel()
        group_of_pack[b] = g
        input_ids[b, :plen] = prompt
        position_ids[b, :plen] = torch.arange(plen)
        segment[b, :plen] = 0
        prompt_flat = b * width + torch.arange(plen)
        for j, (i, start) in enumerate(members, start=1):
            rlen = rows[i].numel() - plen
            input_ids[b, start : start + rlen] = rows[i][plen:]
            position_ids[b, start : start + rlen] = torch.arange(plen, plen + rlen)
            segment[b, start : start + rlen] = j
            pack_of_row[i] = b
            row_positions[i] = torch.cat([prompt_flat, b * width + torch.arange(start, start + rlen)])
    flat = torch.cat(row_positions)  # type: ignore[arg-type]
    used_positions, row_to_used = torch.unique(flat, sorted=True, return_inverse=True)
    return PackPlan(
        input_ids=input_ids,
        position_ids=position_ids,
        segment=segment,
        used_positions=used_positions.to(device),
        row_to_used=row_to_used.to(device),
        pack_of_row=pack_of_row.to(device),
        group_of_pack=group_of_pack.to(device),
    )


def allowed_attention(segment: torch.Tensor) -> torch.Tensor:
    """(packs, L, L) bool: query q may attend to key k. Causal, prompt visible to all, responses to themselves only;
    a padding query sees itself alone (so no softmax row is empty)."""
    width = segment.shape[1]
    causal = torch.ones(width, width, dtype=torch.bool, device=segment.device).tril()
    q, k = segment[:, :, None], segment[:, None, :]
    allowed = causal & (k >= 0) & ((k == 0) | (k == q)) & (q >= 0)
    return allowed | torch.eye(width, dtype=torch.bool, device=segment.device)


def attention_mask_4d(segment: torch.Tensor, kind: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The mask as the model's attention takes it, (packs, 1, L, L): `bool` (True = attend; torch's SDPA) or
    `additive` (0 or the dtype's minimum, added to the scores; transformers' eager attention)."""
    allowed = allowed_attention(segment)[:, None]
    if kind == "bool":
        return allowed
    if kind == "additive":
        mask = torch.zeros(allowed.shape, dtype=dtype, device=segment.device)
        return mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    raise ValueError(f"mask kind {kind!r}: expected 'bool' or 'additive'")


def row_log_probs(
    logits: torch.Tensor,
    plan: PackPlan,
    labels: torch.Tensor,
    temperature: torch.Tensor | None = None,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-row-token log-probs of `labels` (and entropies), in row order, from the packs' logits (packs, L, V).

    Each used pack position's logits are divided by its pack's temperature and normalised once, however many rows
    read it; a row token reads its own label there. Float32 throughout (log p = logit - logsumexp)."""
    vocab = logits.shape[-1]
    selected = logits.reshape(-1, vocab).index_select(0, plan.used_positions).float()
    if temperature is not None:
        width = plan.input_ids.shape[1]
        per_pos = temperature.float().index_select(0, plan.used_positions // width)
        selected = selected / per_pos[:, None]
    lse = torch.logsumexp(selected, dim=-1)
    log_probs = selected[plan.row_to_used, labels] - lse.index_select(0, plan.row_to_used)
    entropy = None
    if with_entropy:
        probs = torch.softmax(selected, dim=-1)
        per_position = lse - (probs * selected).sum(-1)
        entropy = per_position.index_select(0, plan.row_to_used)
    return log_probs, entropy
