"""The context's answer against one kind of wrong answer (issue 46 §2, Truth Scores).

Each fact's texts end in the context's answer (label 1), the model's memory answer or an in-context
distractor (label 0). A head that only notices "this answer also occurs in the context" ranks the
context answer above the memory answer every time and above the distractor half the time (both are
in the context): pooled over both negatives that shortcut is worth an AUROC of 0.75, while accuracy
at the 2:1 ratio hides it at the majority rate. The claim about context-truthful heads is about the
part the shortcut cannot give, so it is read on the context answer against the in-context distractor
alone:

    contrast_auroc(ts, rows, "distractor")   [L, H] fold-mean AUROC of context vs distractor texts
    swap_null(ts, rows, "distractor")        null maps: each fact's two labels swapped at random
    contrast_summary(fm)                     significance (maxT), effect counts, held-out best head

The null swaps the context and distractor labels of each fact with probability ½ on the held-out
margins, the probes held fixed: each probe was trained without the facts it scores, so under "this
head does not tell the context's answer from the distractor" the two margins of a fact are
exchangeable. The test needs no refit, so it runs on a saved map.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from interplab.core.errors import InputError
from interplab.probes.truth.map_stats import (
    AUROC_CHANCE,
    AUROC_MARGIN,
    fold_of_rows,
    head_intervals,
    held_out_best_head,
)

CONTEXT = "context"


def _pairs(ts, rows: pd.DataFrame, negative: str):
    """Per fold: (row indices of the context texts, of the `negative` texts), aligned by fact, for
    the facts that have both and were held out by one fold."""
    if "candidate_kind" not in rows:
        raise InputError("the map's rows carry no candidate_kind (context / memory / distractor)")
    kinds = set(rows["candidate_kind"])
    if negative not in kinds:
        raise InputError(f"no {negative!r} texts in this map (it has {sorted(kinds)})")
    fold = fold_of_rows(ts, len(rows))
    df = pd.DataFrame(
        {
            "fact": rows["index"].to_numpy(),
            "kind": rows["candidate_kind"].to_numpy(),
            "fold": fold,
            "i": np.arange(len(rows)),
        }
    )
    ctx = df[df["kind"] == CONTEXT].drop_duplicates("fact").set_index("fact")
    neg = df[df["kind"] == negative].drop_duplicates("fact").set_index("fact")
    facts = ctx.index.intersection(neg.index)
    facts = facts[(ctx.loc[facts, "fold"] >= 0).to_numpy()]
    out = []
    for f in sorted(set(ctx.loc[facts, "fold"])):
        fs = facts[(ctx.loc[facts, "fold"] == f).to_numpy()]
        out.append((ctx.loc[fs, "i"].to_numpy(), neg.loc[fs, "i"].to_numpy()))
    return out, len(facts)


def _rank_parts(ts, pairs):
    """Per fold: (sum of the context texts' ranks [L*H], rank differences negative − context
    [P, L*H], P), ranks taken over the fold's context and negative texts, ties averaged."""
    m = np.asarray(ts.heldout_margin, dtype=np.float64)
    m = m.reshape(m.shape[0], -1)
    parts = []
    for ic, ineg in pairs:
        r = rankdata(np.concatenate([m[ic], m[ineg]]), axis=0)
        P = len(ic)
        parts.append((r[:P].sum(0), r[P:] - r[:P], P))
    return parts


def _auroc_from(parts, flips=None) -> np.ndarray:
    """Fold-mean AUROC [L*H] (flips None) or [n, L*H] with each fact's labels swapped where flips
    [n, n_facts] (facts in fold order) is 1."""
    vals, start = [], 0
    for rc, diff, P in parts:
        s = rc[None] if flips is None else rc[None] + flips[:, start : start + P] @ diff
        vals.append((s - P * (P + 1) / 2) / (P * P))
        start += P
    out = np.mean(vals, axis=0)
    return out[0] if flips is None else out


def contrast_auroc(ts, rows: pd.DataFrame, negative: str = "distractor") -> np.ndarray:
    """[L, H] fold-mean AUROC of the context texts against the `negative` texts (held-out
    margins)."""
    pairs, _ = _pairs(ts, rows, negative)
    return _auroc_from(_rank_parts(ts, pairs)).reshape(ts.scores.shape)


def swap_null(
    ts, rows: pd.DataFrame, negative: str = "distractor", *, n: int = 1000, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """(observed [L, H], null [n, L, H]): `contrast_auroc` and its within-fact label-swap null."""
    pairs, n_facts = _pairs(ts, rows, negative)
    parts = _rank_parts(ts, pairs)
    flips = (np.random.default_rng(seed).random((n, n_facts)) < 0.5).astype(np.float64)
    shape = ts.scores.shape
    return _auroc_from(parts).reshape(shape), _auroc_from(parts, flips).reshape(n, *shape)


def contrast_summary(
    fm, negative: str = "distractor", *, n_swaps: int = 1000, n_boot: int = 1000, seed: int = 0
) -> tuple[dict, pd.DataFrame]:
    """The context answer against `negative` texts on a saved `FactsTruthMap`: ({negative, n_facts,
    mean_auroc, median_auroc, null_mean, null_max_threshold, n_sig_maxt, n_sig_lo_margin,
    sig_per_layer, sig_layers, top, best_held_out, auroc_map [L][H], mean_auroc_<other negatives>},
    per-head table: layer, head,
    auroc, auroc_lo, auroc_hi (fact bootstrap), p_perm, p_maxt, sig_maxt)."""
    from interplab.probes.truth.facts_map import _perm_p

    ts, rows = fm.scores, fm.rows
    obs, null = swap_null(ts, rows, negative, n=n_swaps, seed=seed)
    p_perm, p_maxt = _perm_p(obs, null)
    sig = p_maxt <= fm.alpha
    subset = rows["candidate_kind"].isin([CONTEXT, negative]).to_numpy()
    y = rows["label"].to_numpy()
    g = rows["index"].to_numpy()
    iv = head_intervals(ts, y, g, B=n_boot, metrics=("auroc",), subset=subset)
    lo = iv["auroc_lo"].to_numpy().reshape(obs.shape)
    thr = AUROC_CHANCE + AUROC_MARGIN
    best = held_out_best_head(ts, y, g, metric="auroc", B=n_boot, seed=seed, subset=subset)
    la, h = np.unravel_index(int(np.argmax(obs)), obs.shape)
    null_max = null.reshape(len(null), -1).max(1)
    others = sorted(set(rows["candidate_kind"]) - {CONTEXT, negative})
    summ = {
        "negative": negative,
        "n_facts": int(iv["n_facts"].iloc[0]),
        "n_swaps": int(n_swaps),
        "mean_auroc": float(obs.mean()),
        "median_auroc": float(np.median(obs)),
        "null_mean": float(null.mean()),
        "null_max_threshold": float(np.quantile(null_max, 1 - fm.alpha)),
        "n_sig_maxt": int(sig.sum()),
        "n_sig_lo_margin": int((sig & (lo >= thr)).sum()),
        "auroc_margin": AUROC_MARGIN,
        "sig_per_layer": [int(v) for v in sig.sum(1)],
        "sig_layers": [int(v) for v in np.flatnonzero(sig.any(1))],
        "top": {
            "layer": int(la),
            "head": int(h),
            "auroc": float(obs[la, h]),
            "lo": float(lo[la, h]),
            "hi": float(iv["auroc_hi"].to_numpy().reshape(obs.shape)[la, h]),
        },
        "best_held_out": best,
        "auroc_map": obs.tolist(),
        **{f"mean_auroc_{k}": float(contrast_auroc(ts, rows, k).mean()) for k in others},
    }
    table = pd.DataFrame(
        {
            "layer": iv["layer"],
            "head": iv["head"],
            "auroc": obs.ravel(),
            "auroc_lo": iv["auroc_lo"],
            "auroc_hi": iv["auroc_hi"],
            "p_perm": p_perm.ravel(),
            "p_maxt": p_maxt.ravel(),
            "sig_maxt": sig.ravel(),
        }
    )
    return summ, table
