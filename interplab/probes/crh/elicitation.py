"""Does steering elicit the concept, and does the model still speak? (issue 28 §1; docs/crh.md "On a real model").

`elicitation_frame(study)` turns a `ConceptStudy` run with `fluency=True` into one row per (concept, method,
strength step): the concept rate (judge label 2), the gibberish rate (label 3, the repo's regex filter), the median
reply NLL under the unsteered model (the reply on its own, `steering.reply_nll`: the question is left out, since a
steered reply is off its topic by design), and the **fluent concept rate**: label 2 *and* NLL at most the fluency
threshold. The threshold is the 95th percentile of the unsteered replies' NLL pooled over all concepts (so 5 % of
ordinary replies would fail it): "elicits" then cannot mean "breaks the model".

Methods: `unsteered` (step 0; the judge's false-positive rate), the three baselines (`diffmean` = CAA on
these pairs = the repo's mean-center, `pca`, `probe`; prompt positions), `penalty p=0` (each sample's own diff
direction, all positions), `sector` (every bin pooled) and `sector best` (the concept's bin with the highest fluent
concept rate summed over strengths — chosen on the same replies, so an optimistic upper bound, labelled as such).

`elicitation_summary(frame)`: per (method, step) the mean over concepts with a percentile bootstrap interval over
concepts (concepts are the sampling unit; the replies of one concept are not independent).

`sector_holdout(study)`: are a concept's sensitive sectors the same for other prompts? Per concept the best sector is
picked on one half of its test prompts (concept rate summed over strengths) and scored on the other half, against the
mean of all sectors there; the mean held-out gain over concepts gets a bootstrap interval. A gain near 0 means the
"best sector" of the selection half was noise."""
from __future__ import annotations

import numpy as np
import pandas as pd

from interplab.core.errors import InputError

__all__ = ["fluency_threshold", "elicitation_frame", "elicitation_summary", "sector_holdout"]


def fluency_threshold(study, q: float = 0.95) -> float:
    """The q-quantile of the unsteered replies' NLL pooled over the study's concepts."""
    vals = [c.nll["null"] for c in study.concepts.values() if c.nll is not None]
    if not vals:
        raise InputError("the study has no fluency scores; run it with fluency=True")
    x = np.concatenate(vals)
    x = x[np.isfinite(x)]
    if x.size == 0:
        raise InputError("every unsteered reply was empty; no fluency threshold can be set")
    return float(np.quantile(x, q))


def _rows(concept: str, method: str, labels: np.ndarray, nll: np.ndarray, strengths: np.ndarray, thr: float):
    """labels / nll: [n, K] (any rows × strength); one row per strength step."""
    out = []
    for k in range(labels.shape[-1]):
        lab, ll = labels[..., k].ravel(), nll[..., k].ravel()
        fluent = np.isfinite(ll) & (ll <= thr)
        out.append({"concept": concept, "method": method, "step": k + 1, "strength": float(strengths[k]),
                    "n": int(lab.size), "concept_rate": float((lab == 2).mean()),
                    "gibberish_rate": float((lab == 3).mean()),
                    "fluent_concept_rate": float(((lab == 2) & fluent).mean()),
                    "nll_median": float(np.nanmedian(ll)) if np.isfinite(ll).any() else float("nan")})
    return out


def elicitation_frame(study, threshold: float | None = None) -> pd.DataFrame:
    """See the module docstring; `threshold` overrides the pooled 95th percentile of the unsteered NLL."""
    thr = fluency_threshold(study) if threshold is None else float(threshold)
    rows = []
    for name, c in study.concepts.items():
        if c.nll is None or c.baselines is None:
            raise InputError(f"concept {name!r} has no steering fluency scores; run the study with steer=True, "
                             "fluency=True")
        rows += _rows(name, "unsteered", c.null_labels[:, None], c.nll["null"][:, None], np.zeros(1), thr)
        rows[-1]["step"] = 0
        bl = c.baselines
        for m, method in enumerate(bl.methods):
            rows += _rows(name, method, bl.labels[m], c.nll["baselines"][m], bl.strengths, thr)
        pm = c.penalty
        p0 = int(np.argmin(np.abs(pm.ps)))
        rows += _rows(name, "penalty p=0", pm.labels[:, p0], c.nll["penalty"][:, p0], pm.strengths, thr)
        sm = c.sector
        rows += _rows(name, "sector", sm.labels, c.nll["sector"], sm.strengths, thr)
        fl = (sm.labels == 2) & np.isfinite(c.nll["sector"]) & (c.nll["sector"] <= thr)
        best = int(np.argmax(fl.sum(axis=(0, 2))))
        for r in _rows(name, "sector best", sm.labels[:, best], c.nll["sector"][:, best], sm.strengths, thr):
            rows.append({**r, "best_bin_deg": float(np.degrees(sm.bin_angles[best]))})
    df = pd.DataFrame(rows)
    df.attrs["fluency_threshold"] = thr
    return df


def elicitation_summary(frame: pd.DataFrame, *, B: int = 5000, seed: int = 0) -> pd.DataFrame:
    """Per (method, step): mean over concepts of the concept, gibberish and fluent concept rates, each with a 95 %
    percentile bootstrap interval over concepts, and the number of concepts with any fluent concept reply."""
    from interplab.probes.stats import bootstrap_ci

    out = []
    for (method, step), g in frame.groupby(["method", "step"], sort=False):
        row = {"method": method, "step": int(step), "n_concepts": int(g["concept"].nunique())}
        for col in ("concept_rate", "gibberish_rate", "fluent_concept_rate"):
            m, lo, hi = bootstrap_ci(g[col].to_numpy(), B=B, seed=seed)
            row.update({col: m, f"{col}_lo": lo, f"{col}_hi": hi})
        row["concepts_with_fluent_hit"] = int((g["fluent_concept_rate"] > 0).sum())
        row["nll_median"] = float(g["nll_median"].median())
        out.append(row)
    return pd.DataFrame(out)


def sector_holdout(study, *, B: int = 5000, seed: int = 0, threshold: float | None = None
                   ) -> tuple[pd.DataFrame, dict]:
    """(per-concept frame, summary): see the module docstring. Rates are label-2 fractions over
    (prompts × strengths) of the held-out half — with `threshold`, fluent label-2 fractions (NLL at
    most the threshold, as `elicitation_frame`); the split is the first ⌈n/2⌉ test prompts vs the
    rest (prompt order is the seeded pair split, independent of the replies; `n_select` of each
    concept's `n_prompts` chose its sector)."""
    from interplab.probes.stats import bootstrap_ci

    rows = []
    for name, c in study.concepts.items():
        sm = c.sector
        if sm is None:
            raise InputError(f"concept {name!r} has no sector map; run the study with steer=True")
        S = sm.labels.shape[0]
        if S < 2:
            raise InputError(f"concept {name!r} has {S} test prompt(s); a held-out sector test needs at least 2")
        hit = sm.labels == 2                                            # [S, bins, K]
        if threshold is not None:
            if c.nll is None:
                raise InputError(f"concept {name!r} has no fluency scores; run the study with "
                                 "fluency=True")
            hit = hit & np.isfinite(c.nll["sector"]) & (c.nll["sector"] <= threshold)
        hit = hit.astype(np.float64)
        sel, held = hit[: (S + 1) // 2], hit[(S + 1) // 2:]
        best = int(np.argmax(sel.mean(axis=(0, 2))))
        rows.append({"concept": name, "n_prompts": S, "n_select": (S + 1) // 2,
                     "best_bin_deg": float(np.degrees(sm.bin_angles[best])),
                     "selection_rate": float(sel[:, best].mean()), "heldout_best_rate": float(held[:, best].mean()),
                     "heldout_mean_rate": float(held.mean()),
                     "heldout_gain": float(held[:, best].mean() - held.mean())})
    df = pd.DataFrame(rows)
    m, lo, hi = bootstrap_ci(df["heldout_gain"].to_numpy(), B=B, seed=seed)
    return df, {"heldout_gain": m, "heldout_gain_lo": lo, "heldout_gain_hi": hi,
                "n_concepts": int(len(df)), "n_positive": int((df["heldout_gain"] > 0).sum()),
                "n_negative": int((df["heldout_gain"] < 0).sum()),
                "heldout_best_rate": float(df["heldout_best_rate"].mean()),
                "heldout_mean_rate": float(df["heldout_mean_rate"].mean()),
                "fluent": threshold is not None}
