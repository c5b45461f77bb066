"""What the Composer's SDPO hint channel does on the real model (SmolLM2-135M-Instruct as released, the real task).

The channel's teacher is the same model with a hint in its context (verl_ext/composer/hints.py): the reference answer
("The correct answer is 4.") or a successful sibling's solution. On questions of the real preset's task this probe
samples a group of responses per question at the training temperature, grades them with the project's reward, and at
every failed response (an error site) measures:

1. **no sibling**: how often a failed response has no successful sibling in its group (the SDPO paper's small-model
   caveat: the sibling form has nothing to distil there, only the reference answer);
2. **the right answer at the error site**: the response's own prefix up to its `\\boxed{`, then the right answer's
   tokens: their log-probability under the hint-conditioned teacher against the student (no hint); the teacher
   should give them more;
3. **the sampled-token term**: mean(logp_teacher - logp_student) over the failed response's tokens and over its
   answer tokens (what `sdpo_advantage_term` adds, before alpha_sdpo);
4. **the loss moves the student there**: a copy of the student takes a few optimizer steps on the channel's loss
   alone (the top-k generalized JSD to the frozen hint teacher on the error-site tokens, composer.yaml's settings,
   the real preset's learning rate), on half of the sites; then the right answer's log-probability at the error site
   is measured again, on the trained half and on the held-out half.

    .venv/bin/python scripts/probe_sdpo_hint.py --out outputs/probe_sdpo_hint.json

HF transformers, fp32; nothing here starts Ray or vLLM. Prints progress and a summary table; the JSON keeps every site.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from verl_ext.composer.hints import build_teacher_context, math_error_sites, render_hint, response_token_log_probs
from verl_ext.composer.sdpo import topk_generalized_jsd
from verl_ext.config.settings import YamlDefaults

REPO = Path(__file__).resolve().parents[1]
COMPOSER = YamlDefaults(REPO / "recipe/composer/config/composer.yaml")  # the channel's settings, read not repeated
REAL = YamlDefaults(REPO / "verl_ext/config/real/smollm2_arithmetic.yaml")  # the real presets' temperature, lr, lengths
BOXED = "\\boxed{"


def say(line: str) -> None:
    print(f"[probe_sdpo_hint] {line}", file=sys.stderr, flush=True)


def load_questions(n: int, split: str) -> list[dict]:
    """The first n questions of the real preset's task (the arithmetic mix) as chat messages and ground truths."""
    import pyarrow.parquet as pq

    from verl_ext.mathgen.cache import ensure_task
    from verl_ext.mathgen.task import TaskSpec

    rows = pq.read_table(ensure_task(TaskSpec(mix="arithmetic")) / f"{split}.parquet").to_pylist()[:n]
    return [{"messages": r["prompt"], "gold": str(r["reward_model"]["ground_truth"])} for r in rows]


def sample_groups(model, tok, questions, group: int, temperature: float, max_new: int, batch: int) -> list[dict]:
    """`group` sampled responses per question, each cut after its end of turn; graded by the project's reward."""
    from verl_ext.reward.math_reward import compute_score

    rows = []
    eos = tok.eos_token_id
    for q_i in range(0, len(questions), batch):
        chunk = questions[q_i : q_i + batch]
        contexts = [tok.apply_chat_template(q["messages"], add_generation_prompt=True, tokenize=False) for q in chunk]
        enc = tok(contexts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            gen = model.generate(**enc, do_sample=True, temperature=temperature, top_k=None, top_p=None,
                                 max_new_tokens=max_new, num_return_sequences=group, pad_token_id=eos,
                                 eos_token_id=eos)  # fmt: skip
        width = enc["input_ids"].shape[1]
        for j, out in enumerate(gen.tolist()):
            q = chunk[j // group]
            ids = out[width:]
            ids = ids[: ids.index(eos) + 1] if eos in ids else ids
            ctx = [t for t, m in zip(enc["input_ids"][j // group].tolist(), enc["attention_mask"][j // group]) if m]
            text = tok.decode(ids, skip_special_tokens=True)
            score = compute_score("mathgen", text, q["gold"])
            rows.append({"uid": str(q_i + j // group), "context": ctx, "response": ids, "text": text,
                         "gold": q["gold"], "acc": float(score["score"] == 1.0)})  # fmt: skip
        say(f"sampled {len(rows)}/{len(questions) * group} responses")
    return rows


def logits_of(model, ids: list[int]) -> torch.Tensor:
    return model(torch.tensor([ids])).logits[0]


def answer_logp(model, tok, context: list[int], prefix: list[int], answer: list[int], hint: str | None) -> float:
    """log p(answer | context [+ hint turn] + prefix), summed over the answer's tokens."""
    row = build_teacher_context(context, prefix + answer, hint or "", tok) if hint else None
    ids, start = (row.input_ids, row.response_start) if row else (context + prefix + answer, len(context))
    with torch.no_grad():
        lp = response_token_log_probs(logits_of(model, ids), ids, start + len(prefix), len(answer))
    return float(lp.sum())


def answer_split(tok, response: list[int], gold: str) -> tuple[list[int], list[int]] | None:
    """The response's tokens up to and including its first `\\boxed{`, and the right answer's tokens after it."""
    text = tok.decode(response, skip_special_tokens=False)
    cut = text.find(BOXED)
    if cut < 0:
        return None
    prefix = tok.encode(text[: cut + len(BOXED)], add_special_tokens=False)
    full = tok.encode(text[: cut + len(BOXED)] + gold + "}", add_special_tokens=False)
    if full[: len(prefix)] != prefix:  # the answer merged with the brace into one token: no clean boundary
        return None
    return prefix, full[len(prefix) :]


def measure_sites(model, tok, rows: list[dict], sibling: bool) -> list[dict]:
    sites = math_error_sites([r["acc"] for r in rows], [r["gold"] for r in rows], [r["uid"] for r in rows],
                             [r["text"] for r in rows] if sibling else None)  # fmt: skip
    out = []
    for row, site in zip(rows, sites):
        if site is None:
            continue
        hint = render_hint(site)
        teacher = build_teacher_context(row["context"], row["response"], hint, tok)
        with torch.no_grad():
            t_lp = response_token_log_probs(logits_of(model, teacher.input_ids), teacher.input_ids,
                                            teacher.response_start, teacher.response_len)  # fmt: skip
            ids = row["context"] + row["response"]
            s_lp = response_token_log_probs(logits_of(model, ids), ids, len(row["context"]), len(row["response"]))
        split = answer_split(tok, row["response"], row["gold"])
        rec = {"uid": row["uid"], "text": row["text"], "gold": row["gold"], "hint_kind": site.template_key,
               "term_mean": float((t_lp - s_lp).mean()), "hint": hint}  # fmt: skip
        if split is not None:
            prefix, answer = split
            n_pre = len(prefix)
            rec["term_answer"] = float((t_lp - s_lp)[n_pre : n_pre + len(answer)].mean()) if n_pre < len(s_lp) else None
            rec["right_student"] = answer_logp(model, tok, row["context"], prefix, answer, None)
            rec["right_teacher"] = answer_logp(model, tok, row["context"], prefix, answer, hint)
            rec["split"] = (prefix, answer)
        rec["row"] = row
        out.append(rec)
    return out


def train_on_sites(model, tok, sites: list[dict], steps: int, lr: float) -> list[float]:
    """A copy of the student takes `steps` Adam steps on the channel's loss alone over `sites` (one batch)."""
    sd = COMPOSER.value("composer.sdpo")
    k, beta, clip = sd["teacher_topk"], sd["jsd_beta"], sd["token_clip"]
    targets = []
    with torch.no_grad():
        for s in sites:
            row = s["row"]
            t = build_teacher_context(row["context"], row["response"], s["hint"], tok)
            t_logits = logits_of(model, t.input_ids)[t.logit_slice].float()
            top = torch.log_softmax(t_logits, -1).topk(k, dim=-1)
            targets.append((row["context"] + row["response"], len(row["context"]), top.values, top.indices))
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    for step in range(steps):
        opt.zero_grad()
        total = 0.0
        for ids, start, t_lp, t_ids in targets:
            logits = logits_of(model, ids)[start - 1 : len(ids) - 1].float()
            loss = topk_generalized_jsd(logits, t_lp, t_ids, beta=beta, token_clip=clip).mean() / len(targets)
            loss.backward()
            total += loss.item()
        opt.step()
        losses.append(total)
        say(f"channel loss step {step + 1}/{steps}: {total:.4f}")
    model.eval()
    return losses


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="JSON with every site")
    p.add_argument("--questions", type=int, default=32, help="training-split questions of the real task")
    p.add_argument("--group", type=int, default=8, help="responses per question (the Composer's rollout.n)")
    p.add_argument("--steps", type=int, default=8, help="optimizer steps on the channel's loss")
    p.add_argument("--lr", type=float, default=None, help="default: the real preset's actor lr")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    return p.parse_args()


def load_student(seed: int, threads: int):
    """The released model in float32 and its tokenizer (left padding, for batched generation)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl_ext.pretrained.smollm2 import ensure_smollm2

    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    model_dir = ensure_smollm2()
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval(), tok


def group_counts(rows: list[dict]) -> dict:
    """Accuracy over the sampled responses, and how many question groups are mixed and all wrong."""
    by_uid: dict[str, list[float]] = {}
    for r in rows:
        by_uid.setdefault(r["uid"], []).append(r["acc"])
    return {"accuracy": statistics.mean(r["acc"] for r in rows),
            "groups_mixed": sum(0 < sum(v) < len(v) for v in by_uid.values()),
            "groups_all_wrong": sum(sum(v) == 0 for v in by_uid.values())}  # fmt: skip


def form_counts(sites: list[dict]) -> dict:
    """One hint form's error sites: siblings, boxed answers, and the teacher's gain on the right answer."""
    with_answer = [s for s in sites if "right_teacher" in s]
    gains = [s["right_teacher"] - s["right_student"] for s in with_answer]
    return {
        "error_sites": len(sites),
        "sites_with_sibling": sum(s["hint_kind"] == "sibling_solution" for s in sites),
        "sites_with_boxed_answer": len(with_answer),
        "right_answer_logp_gain_median": median(gains),
        "right_answer_teacher_higher": sum(g > 0 for g in gains),
        "term_mean_median": median([s["term_mean"] for s in sites]),
        "term_answer_median": median([s.get("term_answer") for s in sites]),
    }


def train_and_remeasure(model, tok, ref_sites: list[dict], steps: int, lr: float, report: dict) -> None:
    """Train on half of the questions' sites, then measure the right answer at every site again (into `report`).
    A held-out site shares no prompt with a trained one, so a change there is the loss generalising, not the same
    question seen again."""
    train_uids = {u for i, u in enumerate(sorted({s["uid"] for s in ref_sites}, key=int)) if i % 2 == 0}
    trained = [s for s in ref_sites if s["uid"] in train_uids]
    held = [s for s in ref_sites if s["uid"] not in train_uids]
    losses = train_on_sites(model, tok, trained, steps, lr)
    for name, group in (("trained", trained), ("held_out", held)):
        after = [answer_logp(model, tok, s["row"]["context"], *s["split"], None) - s["right_student"] for s in group]
        report[f"moved_{name}"] = {"sites": len(group), "right_answer_logp_change_median": median(after),
                                   "increased": sum(x > 0 for x in after)}  # fmt: skip
    report["channel_loss"] = losses


def main() -> None:
    a = parse_args()
    model, tok = load_student(a.seed, a.threads)
    temperature = REAL.value("actor_rollout_ref.rollout.temperature")
    lr = a.lr if a.lr is not None else REAL.value("actor_rollout_ref.actor.optim.lr")
    t0 = time.time()
    rows = sample_groups(model, tok, load_questions(a.questions, "train"), a.group, temperature,
                         REAL.value("data.max_response_length"), batch=4)  # fmt: skip
    report = {"questions": a.questions, "group": a.group, "temperature": temperature, "lr": lr, **group_counts(rows)}
    for form in ("reference", "sibling"):
        sites = measure_sites(model, tok, rows, sibling=form == "sibling")
        report[form] = form_counts(sites)
        say(f"{form}: {json.dumps(report[form])}")
        if form == "reference":
            ref_sites = [s for s in sites if "right_teacher" in s]
    train_and_remeasure(model, tok, ref_sites, a.steps, lr, report)
    report["seconds"] = round(time.time() - t0)
    for s in ref_sites:
        s.pop("row", None), s.pop("split", None)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"report": report, "sites": ref_sites}, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
