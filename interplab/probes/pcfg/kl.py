"""Distribution match of a `LabModel` to its grammar: `interplab.train.grammar_eval.grammar_kl` (the one
implementation, also used while training) with the logits read through `LabModel.run`."""
from __future__ import annotations

import numpy as np
import pandas as pd

from interplab.grammar import PCFG
from interplab.models.lab_model import LabModel
from interplab.probes.pcfg.capture import forward, require_lab_model
from interplab.train.grammar_eval import KLSummary, grammar_kl, kl_summary

__all__ = ["pcfg_kl", "kl_summary", "KLSummary", "position_kl", "describe_kl_summary"]


def pcfg_kl(model: LabModel, g: PCFG, n_sequences: int = 512, seed: int = 0, *, max_len: int | None = None,
            batch_size: int = 64, baselines: bool = True, n_baseline: int = 20000, eval_set=None) -> pd.DataFrame:
    """Per-position KL(p_G ‖ q_θ), TV, excess NLL, entropy floor and n-gram baselines on ``n_sequences`` held-out
    samples of ``g`` (seed ``seed``); columns and ``df.attrs["summary"]`` (`kl_summary`) as in
    `interplab.train.grammar_eval.grammar_kl`."""
    model = require_lab_model(model)
    return grammar_kl(model, g, n_sequences, seed, tokenizer=model.tokenizer, max_len=max_len, batch_size=batch_size,
                      baselines=baselines, n_baseline=n_baseline, eval_set=eval_set,
                      logits_fn=lambda ids, att: forward(model, ids, att)[0])


def position_kl(p, q) -> np.ndarray:
    """[positions] KL(p ‖ q) of one sentence's next-symbol distributions p, q [positions, V+1] (probabilities; terms
    with p = 0 contribute 0), in nats."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    return np.where(p > 0, p * (np.log(np.clip(p, 1e-300, None)) - np.log(np.clip(q, 1e-300, None))), 0).sum(-1)


def describe_kl_summary(summary: dict) -> str:
    """One line (markdown) of a `kl_summary`: mean KL ± its standard error per token, the n-gram baselines when they
    were computed, TV, the excess NLL with the pooled KL it estimates, and the entropy-rate floor."""
    nan = float("nan")
    s = {k: summary.get(k, nan) for k in ("kl", "kl_se", "tv", "excess_nll", "kl_token", "entropy_rate")}
    base = (f" (bigram {summary['kl_bigram']:.4f}, unigram {summary['kl_unigram']:.4f})"
            if "kl_bigram" in summary and "kl_unigram" in summary else "")
    return (f"mean KL **{s['kl']:.4f}** ± {s['kl_se']:.4f} nats/token{base}; TV {s['tv']:.4f}; excess NLL "
            f"{s['excess_nll']:.4f} (pooled KL {s['kl_token']:.4f}); entropy-rate floor {s['entropy_rate']:.4f}.")
