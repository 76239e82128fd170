"""Statistics of a Truth-Score map with the fact as the sampling unit (issue 46 §2, Truth Scores).

A fact gives two or three texts (context answer, memory answer, in-context distractor), so the texts
of one fact are not independent draws: intervals resample facts
(`interplab.probes.stats.cluster_bootstrap_ci`), never texts. Each row's held-out probe margin
(`TruthScores.heldout_margin`) and its fold are enough to recompute a head's cross-validated
accuracy (S, the fold mean) or ROC AUC on any resample of facts without refitting a probe: the
intervals below are over the evaluation data (which facts were scored), with the probes held fixed.

    head_intervals(ts, groups)        per head: S and AUROC with fact-bootstrap intervals
    held_out_best_head(ts, groups)    the best head chosen on half of the facts, scored on the rest
    effect_counts(...)                significant heads that clear an effect-size margin

Why AUROC as the balanced metric: S is accuracy at the data's class ratio (with distractors 1
context answer to 2 wrong ones, so a probe that always says "wrong" scores the majority rate 2/3).
The ROC AUC of the probe's margins is 0.5 for an uninformative probe at any class ratio and does not
depend on where the probe puts its threshold (AdamW from zero on 1:2 data leans towards the majority
class); balanced accuracy is kept beside it as the thresholded reading.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from interplab.core.errors import InputError, ShapeError
from interplab.probes.stats import cluster_bootstrap_ci

AUROC_CHANCE = 0.5
# An effect, not only a p-value: a head counts as clearly above chance when its AUROC (or its
# interval's lower bound) is at least this far above 0.5, and S when it is this far above the
# majority rate. Stated before the runs.
AUROC_MARGIN = 0.10
S_MARGIN = 0.05


def fold_of_rows(ts, n_rows: int | None = None) -> np.ndarray:
    """[N] the fold that held each row out (from the map's provenance); -1 for a row no fold held
    out."""
    tests = ts.provenance.get("fold_test_indices")
    if not tests:
        raise InputError(
            "the map records no fold test indices (provenance['fold_test_indices']); recompute it "
            "with truth_scores_from_activations"
        )
    n = int(n_rows if n_rows is not None else ts.n_samples)
    fold = np.full(n, -1, dtype=np.int64)
    for f, te in enumerate(tests):
        fold[np.asarray(te, dtype=np.int64)] = f
    return fold


def _margins(ts) -> np.ndarray:
    m = np.asarray(ts.heldout_margin, dtype=np.float64)
    if m.ndim != 3 or m.shape[0] != ts.n_samples:
        raise ShapeError(
            f"the map keeps no held-out margins for its {ts.n_samples} rows (got {m.shape}); "
            "recompute it with truth_scores_from_activations"
        )
    return m


def fold_mean_accuracy(rows: np.ndarray) -> float:
    """rows [n, 3] = (fold, label, margin): the mean over folds of each fold's accuracy (S on these
    rows)."""
    ok = rows[:, 0] >= 0
    fold = rows[ok, 0].astype(np.int64)
    correct = ((rows[ok, 2] > 0) == (rows[ok, 1] > 0.5)).astype(np.float64)
    n = np.bincount(fold)
    has = n > 0
    return (
        float(np.mean(np.bincount(fold, weights=correct)[has] / n[has]))
        if has.any()
        else float("nan")
    )


def fold_mean_auroc(rows: np.ndarray) -> float:
    """rows [n, 3] = (fold, label, margin): the mean over folds of each fold's ROC AUC (ties count
    ½); folds without both classes are skipped."""
    fold, y, m = rows[:, 0], rows[:, 1] > 0.5, rows[:, 2]
    out = []
    for f in range(
        int(fold.max()) + 1 if len(fold) else 0
    ):  # rows held out by no fold (-1) are skipped
        sel = fold == f
        pos, neg = m[sel & y], np.sort(m[sel & ~y])
        if pos.size and neg.size:
            below = np.searchsorted(neg, pos, "left") + np.searchsorted(neg, pos, "right")
            out.append(below.sum() / (2.0 * pos.size * neg.size))
    return float(np.mean(out)) if out else float("nan")


METRICS = {"S": fold_mean_accuracy, "auroc": fold_mean_auroc}


def _rows(ts, labels: np.ndarray, layer: int, head: int, fold: np.ndarray) -> np.ndarray:
    return np.column_stack([fold, labels, _margins(ts)[:, layer, head]])


def head_intervals(
    ts,
    labels,
    groups,
    *,
    B: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    metrics: Sequence[str] = ("S", "auroc"),
    subset: np.ndarray | None = None,
) -> pd.DataFrame:
    """One row per head: each metric (S = fold-mean accuracy, auroc = fold-mean ROC AUC, recomputed
    from the held-out margins) with its percentile interval from `B` resamples of whole facts
    (`groups`, the sampling unit); every head sees the same resamples. Columns layer, head,
    <metric>, <metric>_lo, <metric>_hi, n_facts. subset: [N] bool, only these rows (e.g. the
    context and distractor texts)."""
    y = np.asarray(labels, dtype=np.float64)
    g = np.asarray(groups)
    if y.shape != (ts.n_samples,) or g.shape != y.shape:
        raise ShapeError(
            f"labels and groups must be [N={ts.n_samples}], got {y.shape} and {g.shape}"
        )
    keep = np.ones(len(y), bool) if subset is None else np.asarray(subset, bool)
    fold = fold_of_rows(ts)
    L, H = ts.scores.shape
    out = []
    for layer in range(L):
        for head in range(H):
            rows = _rows(ts, y, layer, head, fold)[keep]
            rec = {"layer": layer, "head": head}
            for name in metrics:
                est, lo, hi, k = cluster_bootstrap_ci(
                    rows, g[keep], B=B, level=level, seed=seed, stat=METRICS[name]
                )
                rec.update({name: est, f"{name}_lo": lo, f"{name}_hi": hi, "n_facts": k})
            out.append(rec)
    return pd.DataFrame(out)


def split_groups(groups, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The unique groups (facts) split in two halves by a seeded permutation: (select, score)."""
    uniq = np.unique(np.asarray(groups))
    perm = np.random.default_rng(seed).permutation(uniq)
    half = len(perm) // 2
    return np.sort(perm[:half]), np.sort(perm[half:])


def held_out_best_head(
    ts,
    labels,
    groups,
    *,
    metric: str = "auroc",
    B: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    subset: np.ndarray | None = None,
) -> dict:
    """The best head chosen on one half of the facts and scored on the other (the maximum of L x H
    estimates on the same facts is biased upward): {layer, head, metric, select_value (on the
    selection half), value, lo, hi (on the scoring half, fact-bootstrap interval), n_select,
    n_score, select_facts, score_facts}. subset: [N] bool, only these rows."""
    if metric not in METRICS:
        raise InputError(f"metric must be one of {sorted(METRICS)}, got {metric!r}")
    y = np.asarray(labels, dtype=np.float64)
    g = np.asarray(groups)
    keep = np.ones(len(y), bool) if subset is None else np.asarray(subset, bool)
    sel_facts, score_facts = split_groups(g, seed=seed)
    in_sel, in_score = np.isin(g, sel_facts) & keep, np.isin(g, score_facts) & keep
    fold = fold_of_rows(ts)
    L, H = ts.scores.shape
    stat = METRICS[metric]
    sel_vals = np.array(
        [[stat(_rows(ts, y, la, h, fold)[in_sel]) for h in range(H)] for la in range(L)]
    )
    la, h = np.unravel_index(int(np.nanargmax(sel_vals)), sel_vals.shape)
    rows = _rows(ts, y, int(la), int(h), fold)[in_score]
    est, lo, hi, k = cluster_bootstrap_ci(rows, g[in_score], B=B, level=level, seed=seed, stat=stat)
    return {
        "layer": int(la),
        "head": int(h),
        "metric": metric,
        "select_value": float(sel_vals[la, h]),
        "value": est,
        "lo": lo,
        "hi": hi,
        "n_select": int(len(sel_facts)),
        "n_score": int(k),
        "select_facts": [int(v) for v in sel_facts],
        "score_facts": [int(v) for v in score_facts],
    }


def effect_counts(
    significant: np.ndarray,
    intervals: pd.DataFrame,
    *,
    majority: float,
    S: np.ndarray,
    auroc: np.ndarray,
) -> dict:
    """How many of the `significant` [L, H] heads also clear an effect-size margin: S ≥ majority +
    S_MARGIN, AUROC ≥ 0.5 + AUROC_MARGIN, and AUROC's fact-bootstrap lower bound ≥ 0.5 +
    AUROC_MARGIN."""
    sig = np.asarray(significant, dtype=bool)
    lo = intervals.set_index(["layer", "head"])["auroc_lo"] if "auroc_lo" in intervals else None
    L, H = sig.shape
    lo_map = (
        np.array([[lo.loc[(la, h)] for h in range(H)] for la in range(L)])
        if lo is not None
        else np.full(sig.shape, np.nan)
    )
    thr = AUROC_CHANCE + AUROC_MARGIN
    return {
        "n_sig": int(sig.sum()),
        "n_sig_S_margin": int((sig & (S >= majority + S_MARGIN)).sum()),
        "n_sig_at_majority": int((sig & (np.abs(S - majority) < 1e-9)).sum()),
        "n_sig_auroc_margin": int((sig & (auroc >= thr)).sum()),
        "n_sig_auroc_lo_margin": int((sig & (lo_map >= thr)).sum()),
        "S_margin": S_MARGIN,
        "auroc_margin": AUROC_MARGIN,
        "majority": float(majority),
    }
