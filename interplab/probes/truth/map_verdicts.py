"""Verdicts of the Truth-Score map and lineage experiments (issue 46 §1, §2): a pure function of the
saved results to a list of `Verdict`s with their validity checks, saved in the run as its `validity`
report.

Decision rules (stated here; docs/truth_scores.md quotes them):

* map, "context-truthful heads exist", read on the context answer against the in-context distractor
  (`map_contrast`; the pooled AUROC credits the answer-in-context shortcut with 0.75, as the first
  SmolLM2 run showed: this stricter reading replaced the pooled one after that run): the best head
  by that AUROC, chosen on one half of the facts, is scored on the other half; reproduced when its
  fact-bootstrap lower bound is ≥ 0.5 + AUROC_MARGIN (0.60) and at least one head beats the
  family-wise (maxT) within-fact swap null; not reproduced when its upper bound is < 0.60 or no head
  is significant; otherwise undecided. Without distractors (pairs) it is undecided: the shortcut
  cannot be excluded. Checks: the interval resamples facts (≥ 20), the head tests are family-wise
  corrected, the best head is chosen on facts it is not scored on, and the median head is not at the
  AUROC ceiling (a map where every head decodes the label is a shortcut, not a set of heads).
* map, "near ceiling like the released LLM maps" (mean S 0.83–0.92 on HaluEval, spec §2.2
  [checked]): the map's mean balanced accuracy (accuracy at a 1:1 class ratio) against the lowest
  released mean, 0.83; reproduced above 0.83 + 0.02, not reproduced below 0.83 − 0.02, undecided
  between.
* map, "high-S heads attend to the evidence": Spearman(AUROC, evidence attention) over heads (the
  context-vs-distractor AUROC where there are distractors) with a bootstrap interval over heads;
  reproduced when the interval is above 0, not reproduced when below, undecided when it holds 0.
* lineage, "the descendant inherits the base's map": Pearson r of the two S maps against the
  within-layer head permutation null; reproduced when perm p ≤ 0.05. Checks: the descendant moved (1
  − mean cos OV ≥ MIN_DRIFT) or its r sits clearly below the base map's own fold-seed reliability
  (the ceiling), both maps off the AUROC floor and ceiling, facts as the unit.
* lineage, "heads whose weights change less keep their score": Spearman(cos OV, −abs ΔS) over heads
  with a bootstrap interval; reproduced above 0, not reproduced below 0, undecided when it holds 0;
  same drift check.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from interplab.probes.truth.map_stats import AUROC_CHANCE, AUROC_MARGIN
from interplab.probes.validity import (
    Verdict,
    floor_ceiling,
    held_out,
    multiple_testing,
    reliability_ceiling,
    sampling_units,
)

METHOD = "truth"
RELEASED_MEAN_S_MIN = (
    0.83  # the lowest mean S of the released LLM maps (Vicuna, HaluEval; spec §2.2 [checked])
)
DECISION_MARGIN = (
    0.02  # a verdict is not decided by a difference smaller than this (float rounding, noise)
)
MIN_UNITS = 20
# A descendant "moved" when its heads' OV circuits changed on average by more than 1e-3 in cosine (≈
# 4.5 % of their norm): 170x the pydoc descendant whose lineage test could not fail (1 − cos 6e-6).
# Stated before the new run.
MIN_DRIFT = 1e-3
CEILING_MARGIN = 0.02

CLAIM_HEADS = (
    "some heads' outputs separate the context's answer from hallucinated ones "
    "(context-truthful heads)"
)
CLAIM_CEILING = "the map is near ceiling, like the released LLM maps (mean S 0.83–0.92 on HaluEval)"
CLAIM_EVIDENCE = "high-scoring heads attend to the evidence"
CLAIM_LINEAGE = (
    "a fine-tuned descendant inherits the base's Truth-Score map (Llama-2 ↔ Vicuna r 0.85)"
)
CLAIM_WEIGHTS = "heads whose weights change less keep their score"


def _decide(lo: float, hi: float, threshold: float) -> bool | None:
    """True when the interval is above `threshold`, False when below, None when it holds it."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return None
    if lo >= threshold:
        return True
    if hi < threshold:
        return False
    return None


def _fmt_head(d: Mapping) -> str:
    return f"L{d['layer']}H{d['head']}"


def map_verdicts(fm, *, contrast: dict | None = None, label: str = "") -> list:
    """The verdicts of one `FactsTruthMap` (a `truth-scores` world-facts run). contrast: its
    `map_contrast.contrast_summary(fm)[0]` (context answer vs in-context distractor; None without
    distractors: the heads claim is then undecided). `label` prefixes each claim (e.g. the
    model)."""
    from interplab.probes.stats import spearman_interval

    if not fm.has_balanced():
        from interplab.core.errors import InputError

        raise InputError(
            "the map has no balanced metric or fact-level intervals (saved before issue 46); rerun "
            "truth-scores to get its verdicts"
        )
    pre = f"{label}: " if label else ""
    summ = fm.balanced_summary()
    n_facts = int(fm.rows["index"].nunique())
    n_heads = int(fm.scores.scores.size)
    units = sampling_units(
        n_facts,
        unit="fact",
        subject="fact-bootstrap intervals",
        minimum=MIN_UNITS,
        resampled="fact",
    )
    mt = multiple_testing(
        n_heads,
        f"maxT over {n_heads} heads ({fm.n_null} within-fact label permutations)",
        subject="head significance",
    )
    eff = summ["effects"]
    ea, es = eff["auroc"], eff["S"]
    thr = AUROC_CHANCE + AUROC_MARGIN
    s_part = (
        f"on S (majority rate {es['majority']:.3f}) {es['n_sig']} significant, "
        f"{es['n_sig_S_margin']} ≥ majority + {es['S_margin']:.2f}, "
        f"{es['n_sig_at_majority']} exactly at it"
    )
    if contrast is not None:
        # the claim is read where the answer-in-context shortcut cannot help (map_contrast)
        best, n_sig, n_lo = (
            contrast["best_held_out"],
            contrast["n_sig_maxt"],
            contrast["n_sig_lo_margin"],
        )
        med = float(contrast["median_auroc"])
        mt = multiple_testing(
            n_heads,
            f"maxT over {n_heads} heads ({contrast['n_swaps']} within-fact label swaps)",
            subject="head significance (context vs distractor)",
        )
        heads_measured = (
            f"context answer vs in-context distractor: {n_sig} / {n_heads} heads beat the "
            f"family-wise null, {n_lo} with a fact-bootstrap lower bound ≥ {thr:.2f}; best head "
            f"(chosen on {best['n_select']} facts) {_fmt_head(best)} AUROC {best['value']:.3f} "
            f"[{best['lo']:.3f}, {best['hi']:.3f}] on the other {best['n_score']}; pooled over "
            f"both wrong answers {ea['n_sig']} heads are significant, but against the memory "
            f"answer alone "
            f"the mean AUROC is {contrast['mean_auroc_memory']:.3f} (the answer-in-context "
            f"shortcut); {s_part}"
        )
        decided = _decide(best["lo"], best["hi"], thr)
        supported = False if not n_sig else decided
        note = (
            f"AUROC of the context answer against the in-context distractor (0.5 = chance); "
            f"margin {AUROC_MARGIN:.2f}"
        )
    else:
        best, n_sig = fm.best_held_out, ea["n_sig"]
        med = float(np.nanmedian(fm.scores.auroc))
        mt = multiple_testing(
            n_heads,
            f"maxT over {n_heads} heads ({fm.n_null} within-fact label permutations)",
            subject="head significance",
        )
        heads_measured = (
            f"{n_sig} / {n_heads} heads beat the family-wise null on AUROC, "
            f"{ea['n_sig_auroc_lo_margin']} of them with a fact-bootstrap lower bound ≥ {thr:.2f}; "
            f"best head (chosen on {best['n_select']} facts) {_fmt_head(best)} AUROC "
            f"{best['value']:.3f} [{best['lo']:.3f}, {best['hi']:.3f}] on the other "
            f"{best['n_score']}; {s_part}"
        )
        # without an in-context wrong answer, "the answer occurs in the context" gives the label
        supported = None
        note = (
            "no in-context distractor among the wrong answers: the answer-in-context shortcut "
            "cannot be told from context-truthfulness"
        )
    v_heads = Verdict(
        METHOD,
        pre + CLAIM_HEADS,
        heads_measured,
        supported,
        checks=(
            units,
            mt,
            held_out(
                best["select_facts"],
                best["score_facts"],
                subject="best head (chosen on half of the facts)",
            ),
            floor_ceiling(
                {"median head AUROC": med},
                subject="AUROC map (every head at ceiling = a shortcut)",
                floor=None,
                ceiling=1.0,
                margin=0.05,
            ),
        ),
        note=note,
    )

    bal = summ["mean_balanced_accuracy"]
    ceil_ok = (
        True
        if bal >= RELEASED_MEAN_S_MIN + DECISION_MARGIN
        else False
        if bal < RELEASED_MEAN_S_MIN - DECISION_MARGIN
        else None
    )
    v_ceiling = Verdict(
        METHOD,
        pre + CLAIM_CEILING,
        f"mean balanced accuracy {bal:.3f}, mean AUROC {summ['mean_auroc']:.3f} over {n_heads} "
        f"heads (mean S {float(fm.scores.scores.mean()):.3f} at majority rate "
        f"{eff['S']['majority']:.3f})",
        ceil_ok,
        checks=(units,),
        note=f"decision: mean balanced accuracy against {RELEASED_MEAN_S_MIN} ± {DECISION_MARGIN}",
    )

    if contrast is not None:
        amap, what = np.asarray(contrast["auroc_map"], dtype=float), "AUROC context vs distractor"
    else:
        amap, what = fm.scores.auroc, "AUROC"
    sp = spearman_interval(amap, fm.evidence_mass, seed=0)
    v_ev = Verdict(
        METHOD,
        pre + CLAIM_EVIDENCE,
        f"Spearman({what}, evidence attention) {sp['rho']:.2f} "
        f"[{sp['lo']:.2f}, {sp['hi']:.2f}] over {n_heads} heads",
        _decide(sp["lo"], sp["hi"], 0.0),
        checks=(
            sampling_units(n_heads, unit="head", subject="Spearman over heads", minimum=MIN_UNITS),
            multiple_testing(1, None, subject="one correlation"),
        ),
        note="interval: heads resampled (heads of one model are not independent draws)",
    )
    return [v_heads, v_ceiling, v_ev]


def lineage_verdicts(study, *, label: str = "") -> list:
    """The verdicts of a `LineageStudy` on world facts (base ↔ descendant), with the base map's own
    reliability as the ceiling and the descendant's weight drift (`study.reliability`,
    `study.drift`)."""
    from interplab.core.errors import InputError
    from interplab.probes.stats import spearman_interval

    rel, drift = getattr(study, "reliability", None) or {}, getattr(study, "drift", None) or {}
    if not rel or not drift:
        raise InputError(
            "the lineage study has no base-map reliability or descendant drift (a CtxMem study or "
            "one "
            "saved before issue 46); rerun truth-lineage with data=world-facts"
        )
    pre = f"{label}: " if label else ""
    row = study.lineage.iloc[0]
    r, p = float(row["pearson"]), float(row["perm_p"])
    wd = study.weights_descendant
    d = float(1 - wd["cos_OV"].mean())
    ceiling = float(rel["fold_seed_r_min"])
    n_facts = int(rel["n_facts"])
    units = sampling_units(n_facts, unit="fact", subject="both maps' data", minimum=MIN_UNITS)
    moved = reliability_ceiling(
        r,
        ceiling,
        subject="base ↔ descendant Pearson r",
        drift=d,
        min_drift=MIN_DRIFT,
        drift_name="1 − mean cos(OV)",
        margin=CEILING_MARGIN,
    )
    fc = floor_ceiling(
        {
            "base": float(np.nanmean(study.base.scores.auroc)),
            "descendant": float(np.nanmean(study.descendant.scores.auroc)),
        },
        subject="mean AUROC of the two maps",
        floor=AUROC_CHANCE,
        ceiling=1.0,
        margin=0.05,
    )
    kl = drift.get("kl_facts", float("nan"))
    measured = (
        f"r {r:.3f} (perm p {p:.3f}; within-layer null {float(row['null_mean']):.3f} / 95th pct "
        f"{float(row['null_q95']):.3f}); AUROC maps r {rel['r_auroc']:.3f}; "
        f"base's own reliability: "
        f"fold-seed r ≥ {ceiling:.3f}, split-half r {rel['split_half_r']:.3f} (full length "
        f"{rel['split_half_full']:.3f}); drift: 1 − mean cos(OV) {d:.2g}, weights moved "
        f"{drift['global_rel_change']:.1%}, next-token KL on the probe texts {kl:.3f} nats"
    )
    v_lin = Verdict(
        METHOD,
        pre + CLAIM_LINEAGE,
        measured,
        p <= 0.05,
        checks=(moved, fc, units, multiple_testing(1, None, subject="one correlation test")),
        note=f"decision: within-layer permutation p ≤ 0.05; drift counts from {MIN_DRIFT:g}",
    )
    sp = spearman_interval(
        wd["cos_OV"].to_numpy(),
        -np.abs(study.base.scores.scores - study.descendant.scores.scores).ravel(),
        seed=0,
    )
    v_w = Verdict(
        METHOD,
        pre + CLAIM_WEIGHTS,
        f"Spearman(cos OV, −abs ΔS) {sp['rho']:.2f} [{sp['lo']:.2f}, {sp['hi']:.2f}] "
        f"over {sp['n']} heads",
        _decide(sp["lo"], sp["hi"], 0.0),
        checks=(
            moved,
            sampling_units(
                int(sp["n"]), unit="head", subject="Spearman over heads", minimum=MIN_UNITS
            ),
            multiple_testing(1, None, subject="one correlation"),
        ),
        note="interval: heads resampled",
    )
    return [v_lin, v_w]
