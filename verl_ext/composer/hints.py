"""Error sites, hint text and the hint-augmented teacher context for Composer's SDPO channel (channel 2;
docs/ALGORITHMS.md section 6).

SDPO / OPSD (arXiv 2601.20802, 2601.18734): the teacher is the *same* model given privileged context (a hint) and
scoring, without gradient, the tokens the student already produced. Only the post-hint tokens of the targeted turn
carry loss.

Error sites:
- multi-turn: `step_metas[t]` is the environment's metadata for its response to the agent's t-th action (the
  t-th assistant turn, counting from 0). A meta with `error_kind` marks an error; the hint targets the *next*
  assistant turn, t + 1. Its template is `hint_template_key` if given, else the error kind; the other meta fields
  fill the template.
- agent episodes, the agent unchanged: `tool_errors.ToolErrorRule`s read the conversation the gateway recorded
  (`agent_turns`) and mark a site at the turn after a failed tool result (tool_errors.py); an explicit step_meta for
  the same turn wins.
- single-turn math: a response with acc == 0 is an error site at turn 0. Its hint is a successful sibling's
  solution (same prompt uid, acc > 0) when one exists, else the reference answer.

Alignment (`build_teacher_context`). The student scored its response as `context + response`; the teacher scores
`context[:k] + hint + context[k:] + response`, where k is just before the trailing generation prompt (mode "turn":
the hint is a separate user turn of the chat template) or the end of the context (mode "append": plain hint text).
In both, the response tokens sit at positions [start, start + R) of the teacher input, and a causal LM's
log-prob of response token j comes from the logits at position start + j - 1. So
`log_softmax(teacher_logits[start-1 : start+R-1]).gather(response_ids)` is aligned one-to-one with the student's
`log_softmax(student_logits[len(context)-1 : len(context)+R-1]).gather(response_ids)`; with an empty hint the two are
equal. The response keeps its own mask (tool-output tokens of a multi-turn response stay masked out).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from string import Formatter
from typing import Any

import numpy as np
import torch

from verl_ext.composer.agent_trace import read_trace
from verl_ext.composer.tool_errors import ToolErrorRule, rule_templates, tool_error_sites
from verl_ext.reward.answer_extraction import last_boxed_span

# Keyed by error kind or hint_template_key. Fields in braces come from the error site.
DEFAULT_HINT_TEMPLATES: dict[str, str] = {
    "wrong_answer": "The correct answer is {ground_truth}.",
    "sibling_solution": "Here is a correct solution to this problem:\n{solution}",
    "tool_not_found": "The tool {tool_name} does not exist. Use one of the available tools.",
    "tool_error": "The last tool call failed with: {error_message}. Fix the call before continuing.",
    "format_error": "Your answer does not follow the required format. {format_spec}",
}

_META_KEYS = ("error_kind", "hint_template_key")


@dataclass(frozen=True)
class ErrorSite:
    turn: int  # index of the assistant turn the hint targets (0 for single-turn)
    error_kind: str
    template_key: str
    fields: dict[str, Any] = field(default_factory=dict)


def error_sites_from_step_meta(step_metas: Sequence[dict[str, Any] | None]) -> list[ErrorSite]:
    """Error sites of one trajectory from the environment's per-step metadata (see module docstring)."""
    sites = []
    for t, meta in enumerate(step_metas):
        if not meta or not meta.get("error_kind"):
            continue
        kind = str(meta["error_kind"])
        key = str(meta.get("hint_template_key") or kind)
        extra = {k: v for k, v in meta.items() if k not in _META_KEYS}
        sites.append(ErrorSite(turn=t + 1, error_kind=kind, template_key=key, fields=extra))
    return sites


def math_error_sites(
    accs: Sequence[float],
    ground_truths: Sequence[str],
    uids: Sequence[str],
    responses: Sequence[str] | None = None,
) -> list[ErrorSite | None]:
    """One entry per response of a batch: an error site for each failed answer (acc == 0), else None.

    With `responses`, a failed response gets the solution of the first successful response of its group
    (same uid) as privileged context; otherwise, or with no successful sibling, the reference answer.
    """
    if not (len(accs) == len(ground_truths) == len(uids)) or (responses is not None and len(responses) != len(accs)):
        raise ValueError("accs, ground_truths, uids (and responses) must have one entry per response")
    first_success: dict[str, int] = {}
    for i, (acc, uid) in enumerate(zip(accs, uids)):
        if acc > 0 and uid not in first_success:
            first_success[uid] = i
    sites: list[ErrorSite | None] = []
    for acc, gt, uid in zip(accs, ground_truths, uids):
        if acc > 0:
            sites.append(None)
        elif responses is not None and uid in first_success:
            solution = responses[first_success[uid]]
            sites.append(ErrorSite(0, "wrong_answer", "sibling_solution", {"solution": solution, "ground_truth": gt}))
        else:
            sites.append(ErrorSite(0, "wrong_answer", "wrong_answer", {"ground_truth": gt}))
    return sites


def sibling_site_share(columns: dict[str, Any]) -> float | None:
    """The share of a single-turn batch's error sites (acc == 0) whose group (uid) has a successful response, from
    its `acc` and `uid` columns, whatever `sibling_solution` says: how often a sibling's solution could be the hint
    instead of the reference answer. None where it is undefined: no error site, or sites from `step_metas` /
    `error_kind` (error_sites_for_batch's other sources)."""
    if "acc" not in columns or "step_metas" in columns or "error_kind" in columns:
        return None
    accs, uids = [float(a) for a in columns["acc"]], list(columns["uid"])
    succeeded = {uid for acc, uid in zip(accs, uids) if acc > 0}
    failed = [uid for acc, uid in zip(accs, uids) if not acc > 0]
    return sum(uid in succeeded for uid in failed) / len(failed) if failed else None


def hint_templates(rules: Sequence[ToolErrorRule] = ()) -> dict[str, str]:
    """The hint templates of a run: the defaults, and the ones its tool-error rules write out."""
    return {**DEFAULT_HINT_TEMPLATES, **rule_templates(rules)}


def agent_error_sites(
    step_metas: Sequence[dict[str, Any] | None] | None,
    turns: Any,
    rules: Sequence[ToolErrorRule],
    failed: bool | None,
) -> list[ErrorSite]:
    """One agent episode's error sites: the explicit ones of its `step_metas`, and the ones `rules` find in its
    recorded turns (`turns`: the gateway's record, tool_errors.tool_error_sites) at the turns no explicit one
    targets. By turn."""
    explicit = error_sites_from_step_meta(list(step_metas or []))
    taken = {s.turn for s in explicit}
    found = [
        ErrorSite(s.turn, s.error_kind, s.template_key, dict(s.fields))
        for s in tool_error_sites(read_trace(turns), rules, failed)
        if s.turn not in taken
    ]
    return sorted(explicit + found, key=lambda s: s.turn)


def render_hint(site: ErrorSite, templates: dict[str, str] = DEFAULT_HINT_TEMPLATES) -> str:
    """The hint text for an error site; a clear error for an unknown template key or a missing field."""
    if site.template_key not in templates:
        raise KeyError(f"no hint template {site.template_key!r}; known: {sorted(templates)}")
    template = templates[site.template_key]
    needed = {name for _, name, _, _ in Formatter().parse(template) if name}
    missing = needed - set(site.fields)
    if missing:
        raise ValueError(
            f"hint template {site.template_key!r} needs fields {sorted(missing)}; site has {sorted(site.fields)}"
        )
    return template.format(**site.fields)


@dataclass(frozen=True)
class TeacherContext:
    input_ids: list[int]  # teacher input: context with the hint inserted, then the response
    response_start: int  # position of the first response token in input_ids
    response_len: int
    hint_ids: list[int]

    @property
    def logit_slice(self) -> slice:
        """Logit rows that predict the response tokens (causal LM: row p predicts token p + 1)."""
        return slice(self.response_start - 1, self.response_start - 1 + self.response_len)


def build_teacher_context(
    context_ids: Sequence[int],
    response_ids: Sequence[int],
    hint_text: str,
    tokenizer,
    mode: str = "turn",
) -> TeacherContext:
    """Teacher input ids = context with the hint inserted + the student's response (see module docstring).

    context_ids: everything the student saw before the scored turn (prompt, and for multi-turn the earlier turns
        and the environment's response up to and including the next assistant header).
    response_ids: the student's tokens of the scored turn.
    mode: "turn" puts the hint as a user turn of the tokenizer's chat template before the trailing generation
        prompt (the context must end with it); "append" appends the plain hint text at the end of the context.
    """
    context_ids = [int(x) for x in context_ids]
    if not context_ids:
        raise ValueError("context_ids is empty: a causal LM needs at least one token before the response")
    if mode == "turn":
        hint_ids, gen_ids = _chat_hint_ids(hint_text, tokenizer)
        if context_ids[len(context_ids) - len(gen_ids) :] != gen_ids:
            raise ValueError(
                "mode='turn' needs a context that ends with the chat template's generation prompt "
                f"{gen_ids}; got ...{context_ids[-len(gen_ids) :]}. Use mode='append' for raw-text prompts."
            )
        cut = len(context_ids) - len(gen_ids)
    elif mode == "append":
        hint_ids = list(tokenizer.encode(hint_text, add_special_tokens=False)) if hint_text else []
        cut = len(context_ids)
    else:
        raise ValueError(f"mode must be 'turn' or 'append', got {mode!r}")
    prefix = context_ids[:cut] + hint_ids + context_ids[cut:]
    return TeacherContext(
        input_ids=prefix + [int(x) for x in response_ids],
        response_start=len(prefix),
        response_len=len(response_ids),
        hint_ids=hint_ids,
    )


def _chat_hint_ids(hint_text: str, tokenizer) -> tuple[list[int], list[int]]:
    """(ids of a user turn holding the hint, ids of the generation prompt), cut from rendered chat templates.

    Rendering after a dummy first message keeps template preambles (e.g. a default system prompt) out of the diff.
    """
    first = [{"role": "user", "content": "x"}]
    base = tokenizer.apply_chat_template(first, tokenize=False)
    with_gen = tokenizer.apply_chat_template(first, tokenize=False, add_generation_prompt=True)
    if not with_gen.startswith(base):
        raise ValueError("the chat template's generation prompt is not a suffix of the conversation; use mode='append'")
    gen_ids = list(tokenizer.encode(with_gen[len(base) :], add_special_tokens=False))
    if not hint_text:
        return [], gen_ids
    with_hint = tokenizer.apply_chat_template(first + [{"role": "user", "content": hint_text}], tokenize=False)
    if not with_hint.startswith(base):
        raise ValueError("the chat template renders a new turn by rewriting earlier ones; use mode='append'")
    return list(tokenizer.encode(with_hint[len(base) :], add_special_tokens=False)), gen_ids


def response_token_log_probs(logits: torch.Tensor, input_ids: Sequence[int], start: int, length: int) -> torch.Tensor:
    """Log-probs of input_ids[start : start+length] from one sequence's (L, V) causal-LM logits."""
    if start < 1 or start + length > logits.shape[0]:
        raise ValueError(f"response [{start}, {start + length}) does not fit logits of length {logits.shape[0]}")
    targets = torch.as_tensor(list(input_ids[start : start + length]), dtype=torch.long, device=logits.device)
    rows = torch.log_softmax(logits[start - 1 : start - 1 + length].float(), dim=-1)
    return rows.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def assistant_turn_index(response_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) index of the assistant turn each response token belongs to (maximal runs of mask 1), -1 elsewhere."""
    mask = response_mask.bool()
    prev = torch.zeros_like(mask)
    prev[:, 1:] = mask[:, :-1]
    starts = mask & ~prev
    turn = torch.cumsum(starts.long(), dim=-1) - 1
    return torch.where(mask, turn, torch.full_like(turn, -1))


def sdpo_loss_mask(response_mask: torch.Tensor, target_turns: Sequence[Sequence[int]]) -> torch.Tensor:
    """(B, T) bool mask of the tokens of each row's targeted assistant turns (the post-hint tokens).

    A target turn past the row's last assistant turn is ignored: the episode ended right after the error.
    """
    if len(target_turns) != response_mask.shape[0]:
        raise ValueError(f"target_turns has {len(target_turns)} rows for a batch of {response_mask.shape[0]}")
    turn = assistant_turn_index(response_mask)
    n_turns = int(turn.max().item()) + 1 if turn.numel() else 0
    table = np.zeros((response_mask.shape[0], n_turns + 1), dtype=bool)  # last column: the -1 (non-assistant) slot
    for row, turns in enumerate(target_turns):
        for t in turns:
            if 0 <= t < n_turns:
                table[row, t] = True
    table_t = torch.as_tensor(table, device=response_mask.device)
    return table_t.gather(1, torch.where(turn < 0, torch.full_like(turn, n_turns), turn))


def error_sites_for_batch(
    columns: dict[str, Any], responses: Sequence[str] | None = None, tool_error_rules: Sequence[ToolErrorRule] = ()
) -> list[list[ErrorSite]]:
    """Error sites of every row of a batch, from its non-tensor columns; the first source present wins:

    1. `step_metas`: per row, the environment's per-step metadata (a multi-turn agent loop's extra field), read by
       `error_sites_from_step_meta`: each error step targets the next assistant turn. With `tool_error_rules` and an
       `agent_turns` column (per row the gateway's record of the episode's requests, `core.Session.turns`, as JSON),
       also the sites the rules find in it at the turns no step_meta targets (`agent_error_sites`; `failed` from the
       row's `acc` where the batch has one). A row whose episode was split (`agent_segments` > 1: its trained sample
       is its last segment, whose turns the record does not number) gets no rule sites.
    2. `error_kind`: per row, an error kind or None / "" (e.g. from the reward function's extra info), with optional
       `hint_template_key` and `error_fields` (a dict of template fields) columns; the site is turn 0 and the
       template fields include the row's ground truth.
    3. `acc` (single-turn math): `math_error_sites`; `responses` (decoded) enables sibling solutions.
    """
    n = len(columns["uid"]) if "uid" in columns else None
    if tool_error_rules and "agent_turns" in columns:
        rows = len(columns["agent_turns"])
        metas = columns.get("step_metas", [None] * rows)
        accs = columns.get("acc", [None] * rows)
        segments = columns.get("agent_segments", [1] * rows)
        return [
            agent_error_sites(
                meta,
                turns if int(segments[i] or 1) <= 1 else None,
                tool_error_rules,
                None if acc is None else not float(acc) > 0,
            )
            for i, (meta, turns, acc) in enumerate(zip(metas, columns["agent_turns"], accs, strict=True))
        ]
    if "step_metas" in columns:
        return [error_sites_from_step_meta(list(metas or [])) for metas in columns["step_metas"]]
    truths = [str((rm or {}).get("ground_truth", "")) for rm in columns.get("reward_model", [None] * (n or 0))]
    if "error_kind" in columns:
        keys = columns.get("hint_template_key", [None] * len(columns["error_kind"]))
        extras = columns.get("error_fields", [None] * len(columns["error_kind"]))
        sites = []
        for kind, key, extra, truth in zip(columns["error_kind"], keys, extras, truths or [""] * len(keys)):
            if not kind:
                sites.append([])
                continue
            fields = {"ground_truth": truth, **dict(extra or {})}
            sites.append([ErrorSite(0, str(kind), str(key or kind), fields)])
        return sites
    if "acc" in columns:
        found = math_error_sites([float(a) for a in columns["acc"]], truths, list(columns["uid"]), responses)
        return [[] if s is None else [s] for s in found]
    raise KeyError(
        "composer SDPO finds error sites in a `step_metas` (multi-turn env), `error_kind` or `acc` column (the reward "
        f"function's extra info); the batch has only {sorted(columns)}"
    )


def failed_coverage(sites: Sequence[Sequence[ErrorSite]], accs: Sequence | None) -> dict[str, float]:
    """How much of what failed the hints reach: `sdpo/failed_rows`, the rows whose accuracy is 0, and
    `sdpo/failed_covered_frac`, the share of them with at least one error site (tool errors may be rare once the
    model calls well: the rest failed after valid calls). {} without an accuracy per row."""
    if accs is None or len(accs) != len(sites):
        return {}
    failed = [i for i, acc in enumerate(accs) if acc is not None and not float(acc) > 0]
    covered = sum(1 for i in failed if sites[i])
    return {
        "sdpo/failed_rows": float(len(failed)),
        "sdpo/failed_covered_frac": covered / len(failed) if failed else 0.0,
    }


def turn_span(response_mask_row: torch.Tensor, turn: int) -> tuple[int, torch.Tensor] | None:
    """(first column of assistant turn `turn`, bool mask of its columns) in one row's response, or None if the row
    has no such turn. Everything before that column is context for the hint; the mask is the SDPO loss mask."""
    turns = assistant_turn_index(response_mask_row.unsqueeze(0))[0]
    cols = (turns == turn).nonzero()
    if cols.numel() == 0:
        return None
    return int(cols[0]), turns == turn


@dataclass(frozen=True)
class TeacherRow:
    """One error site's teacher row: batch row `row`, the targeted turn's first response column `start` and its
    columns (bool, over the response), the teacher's prefix (context + hint) and the student tokens it scores."""

    row: int
    start: int
    columns: torch.Tensor
    prefix: list[int]
    continuation: list[int]


def plan_teacher_rows(
    prompt_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
    response_mask: torch.Tensor,
    sites: Sequence[Sequence[ErrorSite]],
    tokenizer,
    mode: str = "turn",
    templates: dict[str, str] = DEFAULT_HINT_TEMPLATES,
) -> list[TeacherRow]:
    """A teacher row per error site whose turn exists: the hint goes just before the targeted turn (after the
    prompt and the response's earlier turns and environment tokens), and the teacher scores the response from that
    turn on. prompt_ids / response_ids are the rows' unpadded tokens; response_mask (B, R) marks the assistant
    tokens (right-padded, so response column j is response_ids[row][j])."""
    rows = []
    for i, row_sites in enumerate(sites):
        for site in row_sites:
            span = turn_span(response_mask[i], site.turn)
            if span is None:  # the episode ended before the targeted turn
                continue
            start, cols = span
            resp = list(response_ids[i])
            ctx = build_teacher_context(
                list(prompt_ids[i]) + resp[:start], resp[start:], render_hint(site, templates), tokenizer, mode=mode
            )
            rows.append(TeacherRow(i, start, cols, ctx.input_ids[: ctx.response_start], resp[start:]))
    return rows


def answer_columns(response_ids: Sequence[Sequence[int]], width: int, tokenizer) -> torch.Tensor:
    """(B, width) bool: the response tokens that hold the final answer, the content of the last ``\\boxed{}``
    (`answer_extraction.last_boxed_span`, the box the math reward grades); a row without one has none.

    Each token id is decoded on its own (once per distinct id of the batch) and the box is found in the concatenation
    of those pieces, so a token is marked when its piece overlaps the box's content: exact for byte-level BPE, and for
    any tokenizer the pieces hold every brace and backslash the box needs (a piece that drops a leading space or
    splits a multi-byte character shifts no box boundary). Special tokens decode to nothing."""
    ids = sorted({int(t) for row in response_ids for t in row})
    pieces = dict(zip(ids, tokenizer.batch_decode([[t] for t in ids], skip_special_tokens=True)))
    out = torch.zeros(len(response_ids), width, dtype=torch.bool)
    for i, row in enumerate(response_ids):
        texts = [pieces[int(t)] for t in row[:width]]
        span = last_boxed_span("".join(texts))
        if span is None:
            continue
        lengths = np.array([len(p) for p in texts], dtype=np.int64)
        ends = np.cumsum(lengths)
        starts = ends - lengths
        hit = (starts < span[1]) & (ends > span[0])
        out[i, : len(texts)] = torch.from_numpy(hit)
    return out


def restrict_rows(rows: Sequence[TeacherRow], keep: torch.Tensor) -> list[TeacherRow]:
    """Each teacher row's columns restricted to `keep` (B, R) bool at its batch row; a row left with no column is
    dropped (the teacher need not score it)."""
    restricted = [replace(t, columns=t.columns & keep[t.row]) for t in rows]
    return [t for t in restricted if bool(t.columns.any())]


def place_teacher_values(rows: Sequence[TeacherRow], values: torch.Tensor, into: torch.Tensor) -> torch.Tensor:
    """Write teacher row r's outputs (values[r, j] is for its continuation token j) into `into` (B, R, ...) at
    column start + j of its batch row, on the targeted turn's columns only; returns `into`."""
    for r, t in enumerate(rows):
        keep = t.columns[t.start :]
        into[t.row, t.start :][keep] = values[r, : into.shape[1] - t.start][keep].to(into.dtype)
    return into
