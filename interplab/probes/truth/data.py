"""CtxMem data for the Truth-Score pipeline on the toy organisms (spec truth_scores.md §7).

- `ctxmem_truth_set`: the Truth-Score set, the HaluEval analogue. Verification prompts
  `ctx e1 v1 .. ek vk cand a q e_q ver` with label 1 iff the candidate a is the context's value v_ctx (gold) and 0
  when it is the memorised value M(e_q) (the "hallucination"), another context pair's value (a "distractor", so
  "is the candidate anywhere in the context?" does not give the label) or a random value. Probed at the last prompt token
  (`ver`, or the chat template's final token), the first position where the label is determined (the candidate
  precedes the query in the organisms' layout). Each item carries the token positions of the evidence
  (e_q and v_ctx inside the context).
- `ctxmem_counterfactual_set` + `context_following`: generation prompts whose queried entity is in the context
  with a counterfactual value (v_ctx != M(e_q)); context-following accuracy = share of greedy answers equal to v_ctx
  (memory rate = share equal to M(e_q)).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from interplab.core.errors import DataError, InputError
from interplab.core.record import Record

FORMATS = ("raw", "chat")


def _token_offset(tokenizer, text: str, prompt_ids) -> int:
    """How many tokens the model's tokenizer puts before the example's own prompt ids (e.g. <bos>)."""
    ids = tokenizer(text)["input_ids"]
    off = len(ids) - len(prompt_ids)
    if off < 0 or list(ids[off:]) != list(prompt_ids):
        raise DataError("the model's tokenizer does not reproduce the CtxMem encoding; use a toy-vocabulary model "
                        "(zoo:toy-*) or pass your own (text, label, evidence) items")
    return off


def _encode_prompt(example, fmt: str, tokenizer):
    """(model input, word positions). raw: the prompt text (the tokenizer adds <bos>); chat: the token ids of the
    chat-templated prompt exactly as the organisms were trained (no <bos>: tokenizing the rendered chat string
    would prepend one)."""
    from interplab.data.examples import encode
    from interplab.data.toy_vocab import toy_vocab

    if fmt not in FORMATS:
        raise InputError(f"format must be one of {FORMATS}, got {fmt!r}")
    enc = encode(example, toy_vocab(), fmt, bos=False)
    prompt_ids = list(enc.ids[:enc.prompt_len])
    if fmt == "chat":
        if tokenizer is not None and tokenizer.convert_ids_to_tokens(prompt_ids[:1]) != ["<|im_start|>"]:
            raise DataError("the model's tokenizer does not use the toy vocabulary; use a zoo:toy-* model or pass "
                            "your own (text, label, evidence) items")
        return prompt_ids, list(enc.word_pos)
    text = example.prompt_text(fmt)
    off = _token_offset(tokenizer, text, prompt_ids) if tokenizer is not None else 1
    return text, [p + off for p in enc.word_pos]


def ctxmem_truth_set(n: int = 292, seed: int = 0, fmt: str = "raw", tokenizer=None, split: str = "test",
                     p_memory_negative: float = 0.5) -> list[dict]:
    """n CtxMem verification items: {"text", "label", "evidence", "candidate_kind", "query_entity"}.

    text: the prompt string (raw format) or its token ids (chat format, see `_encode_prompt`).
    evidence: token positions (0 = first real token, <bos> included) of e_q and v_ctx in the context.
    tokenizer: the model's tokenizer, used to check the encoding and place the positions (default: the toy
    tokenizer's convention, <bos> first in raw format, none in chat).
    split: "test" draws from the held-out bucket no toy organism trained on.
    p_memory_negative: share of the negatives with a = M(e_q); distractors take CtxMemConfig's
    p_distractor_negative (0.4), random values the rest (n=292, seed 0: 139 gold, 70 memory, 70 distractor,
    13 random)."""
    from interplab.data.ctxmem import CtxMem, CtxMemConfig

    gen = CtxMem(replace(CtxMemConfig(), p_memory_negative=p_memory_negative))
    items = []
    for ex in gen.sample(n, seed=seed, mode="ver", split=split):
        text, word_pos = _encode_prompt(ex, fmt, tokenizer)
        pos = ex.meta["pos"]
        evidence = [word_pos[pos["evidence_entity"]], word_pos[pos["evidence_value"]]]
        items.append({"text": text, "label": int(ex.meta["label"]), "evidence": evidence,
                      "candidate_kind": ex.meta["candidate_kind"], "query_entity": ex.meta["query_entity"]})
    return items


def ctxmem_counterfactual_set(n: int = 256, seed: int = 1, fmt: str = "raw", split: str = "test",
                              k_min: int | None = None, k_max: int | None = None) -> list[dict]:
    """n generation prompts with e_q in the context and v_ctx != M(e_q):
    {"text", "context_value", "memory_value", "query_entity"} (text: string for raw, token ids for chat).
    k_min/k_max: context pairs (default: the organisms' training range 3..6; larger values are a harder,
    out-of-distribution variant)."""
    from interplab.data.ctxmem import CtxMem, CtxMemConfig

    base = CtxMemConfig()
    kw = {"k_min": k_min if k_min is not None else base.k_min, "k_max": k_max if k_max is not None else base.k_max}
    if not 1 <= kw["k_min"] <= kw["k_max"] <= 31:
        raise InputError(f"need 1 <= k_min <= k_max <= 31 context pairs, got {kw}")
    gen = CtxMem(replace(base, p_in_context=1.0, p_agree=0.0, **kw))
    out = []
    for ex in gen.sample(n, seed=seed, mode="gen", split=split):
        if fmt not in FORMATS:
            raise InputError(f"format must be one of {FORMATS}, got {fmt!r}")
        out.append({"text": _encode_prompt(ex, fmt, None)[0], "context_value": ex.meta["context_value"],
                    "memory_value": ex.meta["memory_value"], "query_entity": ex.meta["query_entity"]})
    return out


class ContextFollowing(Record):
    """`context_following`: context_acc, memory_rate, other_rate, n; answers (the decoded replies) when asked."""

    KEYS = ("context_acc", "memory_rate", "other_rate", "n")
    OPTIONAL = ("answers",)


def context_following(model, items: list[dict], edits=None, *, batch_size: int = 64, max_new_tokens: int = 2,
                      return_answers: bool = False) -> ContextFollowing:
    """Greedy-generate each counterfactual prompt's answer and score the generated text
    (`interplab.data.scoring.starts_with_answer`: the reply is the value or begins with it as whole words; a token
    string such as "ĠParis" is never compared). Give `max_new_tokens` enough for the longest value on a real model.

    Returns {"context_acc", "memory_rate", "other_rate", "n"} (+ "answers": the decoded replies, when asked)."""
    from interplab.data.scoring import starts_with_answer

    if not items:
        raise InputError("no counterfactual items given")
    answers = []
    for s in range(0, len(items), batch_size):
        chunk = items[s:s + batch_size]
        gen = model.generate([it["text"] for it in chunk], max_new_tokens=max_new_tokens, edits=edits,
                             return_logits=False, chat=False)
        answers.extend(model.tokenizer.decode(toks, skip_special_tokens=True).strip() for toks in gen.new_tokens)
    ctx = np.array([starts_with_answer(a, it["context_value"]) for a, it in zip(answers, items)])
    mem = np.array([starts_with_answer(a, it["memory_value"]) for a, it in zip(answers, items)])
    out = ContextFollowing(context_acc=float(ctx.mean()), memory_rate=float(mem.mean()),
                           other_rate=float(1 - ctx.mean() - mem.mean()), n=len(items))
    if return_answers:
        out["answers"] = answers
    return out


def user_truth_set(path, *, limit: int | None = None, seed: int | None = None, split: str = "probe") -> list[dict]:
    """{"text", "label"} items from a file: a user file with `text` and `label` columns (label 1/0 or
    gold/hallucinated; 1 = context-supported), or a HaluEval-QA file in any of its schemas (raw QA, setD or the
    evaluation annotations), which `interplab.data.adapters.halueval` turns into the paper's probing texts
    (split 'probe' = the first 292 rows, as the repo; 'remain' / 'all'). limit: at most this many items."""
    from interplab.data.files import preview
    from interplab.data.user import user_records

    cols = set(preview(path, 1).columns)
    if {"text", "label"} <= cols:
        items = list(user_records("truth", path, limit=limit, seed=seed))
    else:
        from interplab.data.adapters.halueval import truth_probe_items

        items = [{"text": it["text"], "label": it["label"]}
                 for it in truth_probe_items(path, split=split, limit=limit, seed=seed or 0)]
    if len({it["label"] for it in items}) < 2:
        raise DataError(f"{path}: the Truth-Score probe needs both labels (1 = gold, 0 = hallucinated); the file "
                        f"gives only {sorted({it['label'] for it in items})}")
    return items
