"""Fluency of gated replies on world facts (issue 46 §2): is a gated model still answering, or has the gate broken it?

A gate that raises the number of replies naming the context's value by breaking the model is no TruthProbe effect;
a gate that makes every reply one string (the committed α = 6 run: 137 times "embrance…") tests nothing at all. Each
generated reply therefore carries, beside its text, its token ids (space-joined, stop tokens dropped) and its mean
per-token negative log-likelihood as a continuation of its own prompt under the *ungated* model. From those the
validity checks (`interplab.probes.validity`) read: the most common reply's share, the distinct-token rate over the
model's own tokens (a reply that loops one sub-word without spaces is one whitespace "word", so words would miss
it), and the share of replies above the ungated replies' 95% NLL quantile.
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from interplab.core.errors import InputError
from interplab.probes.validity import Check, distinct_tokens, repeated_reply, reply_nll

REPLY_COLUMNS = ("reply", "tokens", "nll")   # what `generated_choice` adds per reply for these checks


def continuation_nll(model, prompt_ids: Sequence[Sequence[int]], reply_ids: Sequence[Sequence[int]], *,
                     batch_size: int = 32) -> np.ndarray:
    """[n] mean NLL per token (nats) of each reply's tokens after its prompt's tokens under `model` with no edit;
    NaN for an empty reply (the checks count it as above any limit)."""
    if len(prompt_ids) != len(reply_ids):
        raise InputError(f"{len(prompt_ids)} prompts but {len(reply_ids)} replies; pass one prompt per reply")
    out = np.full(len(reply_ids), np.nan)
    todo = [i for i, r in enumerate(reply_ids) if len(r)]
    for s in range(0, len(todo), batch_size):
        idx = todo[s:s + batch_size]
        rows = [list(map(int, prompt_ids[i])) + list(map(int, reply_ids[i])) for i in idx]
        ns = [len(reply_ids[i]) for i in idx]
        K = max(ns) + 1        # the batch is left-padded: the last K positions predict every reply token
        with torch.no_grad():
            logits = model.run(rows, logits_last=K, chat=False).logits.float()
        logp = torch.log_softmax(logits, -1)
        for j, (i, n) in enumerate(zip(idx, ns)):
            tgt = torch.as_tensor(rows[j][-n:], device=logp.device)
            lp = logp[j, K - 1 - n:K - 1].gather(-1, tgt[:, None]).squeeze(-1)
            out[i] = float(-lp.mean())
    return out


def token_string(ids: Sequence[int]) -> str:
    """Token ids as the space-joined string the distinct-token check splits."""
    return " ".join(str(int(t)) for t in ids)


def _tokens(df: pd.DataFrame) -> list[str]:
    return ["" if not isinstance(t, str) else t for t in df["tokens"]]


def fluency(replies: pd.DataFrame) -> dict:
    """One condition's replies (columns `REPLY_COLUMNS`, and `context` where present) summarised: the share naming
    the context's value, mean NLL/token under the ungated model (over non-empty replies), mean distinct-token rate
    (model tokens), the most common reply's share, empty replies."""
    texts = [str(r).strip().casefold() for r in replies["reply"].fillna("")]
    rates = []
    for t in _tokens(replies):
        toks = t.split()
        rates.append(len(set(toks)) / len(toks) if toks else 0.0)
    nll = replies["nll"].to_numpy(dtype=float)
    top = Counter(texts).most_common(1)[0] if texts else ("", 0)
    ctx = float(replies["context"].astype(float).mean()) if "context" in replies and len(replies) else float("nan")
    return {"n": len(texts), "context_rate": ctx, "nll_per_token": float(np.nanmean(nll)) if np.isfinite(nll).any() else float("nan"),
            "distinct_token_rate": float(np.mean(rates)) if rates else float("nan"),
            "top_reply_share": top[1] / len(texts) if texts else float("nan"), "top_reply": top[0][:60],
            "empty": int(sum(not t for t in texts))}


def generation_checks(replies: pd.DataFrame, reference: pd.DataFrame | None, *, subject: str) -> list[Check]:
    """The degenerate-generation checks of one condition's replies: repeated reply, distinct-token rate (model
    tokens) and, against the ungated replies of the same prompts (`reference`; None for the ungated replies
    themselves), reply NLL. Limits are validity.py's defaults (50% share, 0.5 rate, 50% above the 95% quantile)."""
    out = [repeated_reply(list(replies["reply"].fillna("")), subject=subject),
           distinct_tokens(_tokens(replies), subject=subject)]
    if reference is not None:
        out.append(reply_nll(replies["nll"].to_numpy(dtype=float), reference["nll"].to_numpy(dtype=float),
                             subject=subject))
    return out
