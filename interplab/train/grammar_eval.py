"""Distribution match of a causal LM to the grammar it is trained on (spec ../shared/methods/pcfg_parse.md §2.5):
per-position KL(p_G ‖ q_θ) and TV over the V terminals + EOS, excess NLL, the grammar entropy-rate floor, and
unigram / bigram baselines counted from grammar samples.

`grammar_kl` is the one implementation. While training it reads a plain causal LM's logits
(``model(input_ids=..., attention_mask=...).logits``, as `interplab.train.evaluate` does); the probes
(`interplab.probes.pcfg.pcfg_kl`) pass ``logits_fn`` that runs a `LabModel`. The model's distribution is its full
softmax read at the terminal and EOS ids, *not* renormalised: mass on other tokens counts as error (so
E[excess NLL] = E[KL] exactly).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
import pandas as pd
import torch

from interplab.core.errors import InputError
from interplab.core.record import Record
from interplab.grammar import PCFG, grammar_vocab, next_token_logprobs, ngram_baselines, sample_eval_set, to_model_ids

__all__ = ["grammar_kl", "kl_summary", "KLSummary", "next_logprobs", "kl_rows", "max_len_for"]

LogitsFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def max_len_for(model, max_len: int | None) -> int:
    """Longest grammar string the model can read: BOS + string + EOS must fit its context (default 64)."""
    n_ctx = getattr(model, "n_ctx", None)
    if n_ctx is None:
        n_ctx = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    cap = int(n_ctx) - 2 if n_ctx else 64
    return min(max_len or 64, cap)


def _plain_logits(model) -> LogitsFn:
    # right padding is exact for a causal model: pads only follow real tokens
    def fn(ids, att):
        return model(input_ids=ids, attention_mask=att).logits.float().cpu()
    return fn


@torch.no_grad()
def next_logprobs(logits_fn: LogitsFn, g: PCFG, tokens, lengths, tokenizer, *, batch_size: int = 64) -> torch.Tensor:
    """log q_θ(v | w≤p) at p = 0..n over the V terminals + EOS: [B, n+1, V+1] (float64, not renormalised).
    ``logits_fn(ids, att)`` maps right-padded model ids [b, T] to logits [b, T, V_model] at the same positions."""
    gv = grammar_vocab(g, tokenizer)
    cols = torch.cat([gv["terminals"], torch.tensor([gv["eos"]])])
    outs = []
    for s in range(0, tokens.shape[0], batch_size):
        t, L = tokens[s:s + batch_size], lengths[s:s + batch_size]
        ids, att = to_model_ids(g, t, L, gv)
        lp = torch.log_softmax(logits_fn(ids, att).double(), -1)
        outs.append(lp[:, :t.shape[1] + 1][..., cols])
    return torch.cat(outs, 0)


def kl_rows(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """KL(p‖q) per row over the last dim (p, q log-probabilities; terms with p = 0 contribute 0)."""
    p = logp.exp()
    diff = torch.where(p > 0, logp - logq, torch.zeros_like(logp))
    return (p * diff).sum(-1)


@torch.no_grad()
def grammar_kl(model, g: PCFG, n_sequences: int = 512, seed: int = 0, *, tokenizer, max_len: int | None = None,
               batch_size: int = 64, baselines: bool = True, n_baseline: int = 20000, eval_set=None,
               logits_fn: LogitsFn | None = None) -> pd.DataFrame:
    """Distribution match of ``model`` to grammar ``g`` on ``n_sequences`` held-out samples (seed ``seed``).

    Returns one row per position p (p = 0 is BOS → first token) with columns: ``position``, ``n`` (sequences
    reaching p), ``kl`` and ``kl_se`` (mean and standard error of KL(p_G ‖ q_θ) in nats), ``tv`` (½Σ|p_G − q_θ|
    plus the model's mass on non-grammar tokens), ``excess_nll`` (mean −log q_θ(w) + log p_G(w) at the sampled
    next symbol), ``entropy`` (mean −log p_G(w): the loss floor), ``nll_model``, and with ``baselines`` the KL of the
    unigram and bigram baselines (``kl_unigram``, ``kl_bigram``). ``df.attrs["summary"]`` (see `kl_summary`) holds
    the per-token averages averaged per sequence first (kl, kl_se, tv, entropy_rate, nll_model, kl_unigram,
    kl_bigram), and pooled over tokens: kl_token and excess_nll (its unbiased estimate) with excess_nll_se, the
    standard error of their difference. ``eval_set``: (tokens, lengths, trees) to use instead of fresh samples."""
    if n_sequences < 1:
        raise InputError("n_sequences must be >= 1.")
    if eval_set is None:
        toks, lengths, trees = sample_eval_set(g, n_sequences, seed, max_len_for(model, max_len))
    else:
        toks, lengths, trees = eval_set
    trunc = torch.tensor([t.truncated for t in trees]) if trees is not None else torch.zeros(len(lengths), dtype=torch.bool)
    logp = next_token_logprobs(g.to(torch.float64), toks, lengths)  # [B, n+1, V+1]
    logq = next_logprobs(logits_fn or _plain_logits(model), g, toks, lengths, tokenizer, batch_size=batch_size)
    B, n1, _ = logp.shape
    pos = torch.arange(n1)[None]
    # a truncated row has no observed continuation at p = len (and its EOS step is unknown): mask p = len there
    valid = (pos < lengths[:, None]) | ((pos == lengths[:, None]) & ~trunc[:, None])
    cols = _per_token(g, toks, lengths, logp, logq)
    if baselines:
        cols.update(_baseline_kls(g, toks, logp, n_baseline, max_len_for(model, max_len)))
    df = _position_table(cols, valid)
    df.attrs["summary"] = _summary(cols, valid)
    df.attrs["grammar"] = g.name
    return df


def _per_token(g: PCFG, toks, lengths, logp, logq) -> dict[str, torch.Tensor]:
    """[B, n+1] per-position quantities: kl, tv, excess_nll, entropy (−log p_G(w)) and nll_model."""
    B, n1, _ = logp.shape
    pos = torch.arange(n1)[None]
    kl = kl_rows(logp, logq)
    p = logp.exp()
    q = logq.exp()
    tv = 0.5 * ((p - q).abs().sum(-1) + (1 - q.sum(-1)).clamp_min(0))
    nxt = torch.cat([toks.clamp(0, g.V - 1), torch.zeros(B, 1, dtype=torch.long)], 1)[:, :n1]
    nxt = torch.where(pos == lengths[:, None], torch.full_like(nxt, g.V), nxt)
    lp_obs = logp.gather(2, nxt[..., None])[..., 0]
    lq_obs = logq.gather(2, nxt[..., None])[..., 0]
    return {"kl": kl, "tv": tv, "excess_nll": lp_obs - lq_obs, "entropy": -lp_obs, "nll_model": -lq_obs}


def _baseline_kls(g: PCFG, toks, logp, n_baseline: int, max_len: int) -> dict[str, torch.Tensor]:
    B, n1, _ = logp.shape
    bl = ngram_baselines(g, n_baseline, max_len=max_len)
    uni = bl["unigram"].expand(B, n1, g.V + 1)
    prev = torch.cat([torch.full((B, 1), g.V + 1), toks.clamp(0, g.V - 1)], 1)[:, :n1]
    bi = bl["bigram"][prev]
    return {"kl_unigram": kl_rows(logp, uni), "kl_bigram": kl_rows(logp, bi)}


def _position_table(cols: dict[str, torch.Tensor], valid: torch.Tensor) -> pd.DataFrame:
    n1 = valid.shape[1]
    vf = valid.double()
    cnt = vf.sum(0)
    rows = {"position": np.arange(n1), "n": cnt.numpy().astype(int)}
    for k, v in cols.items():
        v = torch.where(valid, v, torch.zeros_like(v))
        mean = v.sum(0) / cnt.clamp_min(1)
        rows[k] = mean.numpy()
        if k in ("kl", "excess_nll"):
            var = ((v - mean[None]) ** 2 * vf).sum(0) / (cnt - 1).clamp_min(1)
            rows[k + "_se"] = (var / cnt.clamp_min(1)).sqrt().numpy()
    df = pd.DataFrame(rows)
    return df[df["n"] > 0].reset_index(drop=True)


def _summary(cols: dict[str, torch.Tensor], valid: torch.Tensor) -> dict:
    B = valid.shape[0]
    vf = valid.double()
    kl = cols["kl"]
    # per-token averages, averaged per sequence first (spec §2.5) ...
    summ = {}
    ntok = vf.sum(1).clamp_min(1)
    for k, v in cols.items():
        per_seq = torch.where(valid, v, torch.zeros_like(v)).sum(1) / ntok
        summ[k] = float(per_seq.mean())
        if k == "kl":
            summ[k + "_se"] = float(per_seq.std() / math.sqrt(B)) if B > 1 else float("nan")
    # ... and pooled over all tokens: the excess NLL is an unbiased estimate of the pooled KL (the per-sequence
    # average is not, because a sequence's length depends on its tokens)
    N = float(vf.sum())
    kl_tok = float((kl * vf).sum()) / N
    ex = torch.where(valid, cols["excess_nll"], torch.zeros_like(kl))
    summ["kl_token"] = kl_tok
    summ["excess_nll"] = float(ex.sum()) / N
    diff = (ex - kl * vf).sum(1)
    summ["excess_nll_se"] = float(math.sqrt(B * float(diff.var())) / N) if B > 1 else float("nan")
    summ["entropy_rate"] = summ.pop("entropy")
    summ["n_sequences"] = int(B)
    summ["n_tokens"] = int(vf.sum())
    return summ


class KLSummary(Record):
    """`kl_summary`: kl, kl_se, tv, nll_model (per-token, averaged per sequence), kl_token, excess_nll,
    excess_nll_se (pooled over tokens), entropy_rate, n_sequences, n_tokens; kl_unigram and kl_bigram when the
    frame was computed with baselines."""

    KEYS = ("kl", "kl_se", "tv", "excess_nll", "nll_model", "kl_token", "excess_nll_se", "entropy_rate",
            "n_sequences", "n_tokens")
    OPTIONAL = ("kl_unigram", "kl_bigram")


def kl_summary(df: pd.DataFrame) -> KLSummary | dict:
    """The summary of a `grammar_kl` / `pcfg_kl` frame: kl, kl_se, tv, entropy_rate, nll_model, kl_unigram,
    kl_bigram (per-token, averaged per sequence), kl_token / excess_nll / excess_nll_se (pooled over tokens),
    n_sequences, n_tokens. A frame without ``attrs["summary"]`` (e.g. one read back from a CSV) gives ``{}``."""
    summ = df.attrs.get("summary")
    return KLSummary(summ) if summ else {}
