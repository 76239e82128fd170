"""Analyses built on Truth Scores: evidence-attention summaries and TruthProbe gating sweeps (used by the
experiments in `interplab.experiments.truth_scores` and by the app page)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from interplab.core.errors import ConfigError
from interplab.probes.stats import bootstrap_stat, percentile_interval, spearman, wilson_interval


def evidence_summary(scores, em, *, k_frac: float = 0.25, n_boot: int = 1000, seed: int = 0):
    """EM of the top-k, bottom-k and random-k heads by Truth Score, each with a 95% bootstrap CI over heads.

    Returns (DataFrame[group, k, mean, lo, hi], spearman(S, EM)). The random group's mean and CI come from random
    k-subsets (the CI is the 2.5-97.5% range of the random-subset means)."""
    import pandas as pd

    s = np.asarray(getattr(scores, "scores", scores), dtype=float).ravel()
    e = np.asarray(em, dtype=float).ravel()
    if s.shape != e.shape:
        raise ConfigError(f"scores ({s.size} heads) and evidence mass ({e.size} heads) must match")
    k = max(1, int(round(k_frac * s.size)))
    order = np.argsort(-s, kind="stable")
    rng = np.random.default_rng(seed)
    rows = []
    for group, idx in (("top-k", order[:k]), ("bottom-k", order[-k:])):
        mean, lo, hi = bootstrap_stat(e[idx], lambda v: v.mean(-1), B=n_boot, rng=rng)
        rows.append({"group": group, "k": k, "mean": mean, "lo": lo, "hi": hi})
    rand = np.array([e[rng.choice(s.size, k, replace=False)].mean() for _ in range(n_boot)])
    lo, hi = percentile_interval(rand)
    rows.append({"group": "random-k", "k": k, "mean": float(rand.mean()), "lo": float(lo), "hi": float(hi)})
    return pd.DataFrame(rows), spearman(s, e)


binomial_ci = wilson_interval  # the Wilson interval lives in probes/stats.py; this name stays for callers


def gating_sweep(model, items, scores, *, modes: Sequence[str] = ("normalize", "contrast"),
                 sites: Sequence[str] = ("z", "attn_out_chunks"), alphas: Sequence[float] = (0.0, 0.5, 1, 2, 4, 6),
                 score_source: str = "", batch_size: int = 64, progress=None, rebase: str = "none"):
    """Context-following accuracy of `model` on CtxMem counterfactual `items` under HeadGate(truth_gates(scores,
    mode, alpha, rebase=rebase), site) for every (mode, site, alpha). alpha 0 is the ungated baseline (computed
    once). rebase="layer_mean" keeps every layer's mean gate at 1 (deep models; see interventions.head_gate).
    Returns a DataFrame: score_source, mode, site, alpha, context_acc (+ Wilson CI), memory_rate, other_rate,
    gate_min, gate_max, n_negative."""
    import pandas as pd

    from interplab.interventions.head_gate import HeadGate, gate_summary, truth_gates
    from interplab.probes.truth.data import context_following

    s = np.asarray(getattr(scores, "scores", scores), dtype=float)
    HeadGate(np.ones_like(s)).validate(model)  # shape check against the target model
    rows, base = [], None
    total = len(modes) * len(sites) * len(alphas)
    done = 0
    for mode in modes:
        for site in sites:
            for alpha in alphas:
                g = truth_gates(s, mode, alpha, n_layers=model.n_layers, n_heads=model.n_heads, rebase=rebase)
                if float(alpha) == 0.0 and base is not None:
                    res = base
                else:
                    import warnings

                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # negative gates are reported in the table instead
                        gate = HeadGate(g, site=site)
                    res = context_following(model, items, [gate], batch_size=batch_size)
                    if float(alpha) == 0.0:
                        base = res
                lo, hi = binomial_ci(res["context_acc"], res["n"])
                rows.append({"score_source": score_source, "mode": mode, "site": site, "alpha": float(alpha),
                             "rebase": rebase,
                             "context_acc": res["context_acc"], "context_acc_lo": lo, "context_acc_hi": hi,
                             "memory_rate": res["memory_rate"], "other_rate": res["other_rate"], "n": res["n"],
                             **gate_summary(g)})
                done += 1
                if progress is not None:
                    progress(done, total)
    return pd.DataFrame(rows)


def verification_accuracy(model, items, edits=None, *, batch_size: int = 64, true_word: str = "T",
                          false_word: str = "F") -> float:
    """Mode-V accuracy: share of verification prompts whose next-token logit prefers the right one of T/F
    (T iff label 1). Items are `ctxmem_truth_set` dicts (text, label)."""
    import torch

    tok = model.tokenizer
    t_id, f_id = tok.convert_tokens_to_ids(true_word), tok.convert_tokens_to_ids(false_word)
    correct = 0
    with torch.no_grad():
        for s in range(0, len(items), batch_size):
            chunk = items[s:s + batch_size]
            logits = model.run([it["text"] for it in chunk], edits=edits, chat=False).logits[:, -1]
            pred_true = logits[:, t_id] > logits[:, f_id]
            lab = torch.as_tensor([it["label"] for it in chunk], device=pred_true.device).bool()
            correct += int((pred_true == lab).sum())
    return correct / len(items)


def head_ablation_effects(model, items, *, batch_size: int = 64, progress=None):
    """[n_layers, n_heads] drop in Mode-V accuracy when zero-ablating each head's z (one head at a time), and the
    unablated accuracy. (Spec §8 test 2: the top Truth-Score head should hurt most.)"""
    from interplab.interventions import Ablate

    base = verification_accuracy(model, items, batch_size=batch_size)
    out = np.zeros((model.n_layers, model.n_heads))
    for layer in range(model.n_layers):
        for head in range(model.n_heads):  # one causal run per head is the measurement itself
            acc = verification_accuracy(model, items, [Ablate(f"attn_z.{layer}", heads=[head])],
                                        batch_size=batch_size)
            out[layer, head] = base - acc
            if progress is not None:
                progress(layer * model.n_heads + head + 1, model.n_layers * model.n_heads)
    return out, base
