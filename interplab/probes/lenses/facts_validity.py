"""Verdicts of a many-pair lens study (`lenses-facts`; issue 46): the claims docs/lenses.md makes
from it, each with the checks that say whether the run could have shown it.

The sampling unit is the fact pair (each interval resamples pairs). A head or a layer that the docs
*name* is chosen from many (L·H heads, L layers), so naming it on the pairs that then score it is a
selection on the scored items and a multiple test at once. Here it is chosen on one seeded half of
the included pairs and scored on the other half (`held_out=False` reproduces the old procedure,
choosing and scoring on every pair, and its checks fail):

- recall head: the head with the largest |mean attn_z patching| on the selection half; supported
  when it is also the largest on the held-out half and its held-out interval excludes 0 (one test:
  no correction needed);
- recall layer: the first layer where patching the last token restores more than patching the
  subject's last token (mean over the selection half); supported when on the held-out half last −
  subject_last is below 0 (interval under 0) one layer before and above 0 (interval over 0) at that
  layer — both must hold, an intersection-union test, so no correction is needed;
- map agreement: every row of `FactLensStudy.head_agreement` (patching, DLA, an external Truth-Score
  map), with the layer partialled out and heads permuted within their layer
  (`depth.depth_partialled`), Holm-corrected over the rows; supported when the corrected p < `alpha`
  and the partial ρ > 0.

Checks: held_out (selection vs scored pairs), multiple_testing, sampling_units (fact pairs in the
scored set, at least `min_units`; heads within layers for the agreement), floor_ceiling (the
normalised patching effects of the compared arms not all at 0 or all at 1).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from interplab.probes import stats
from interplab.probes import validity as V
from interplab.probes.lenses.facts import ROLES

_ALPHA = 0.05
_UNIT = "fact pair"


def halves(study, *, held_out: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(selection, scored) row indices into the included pairs: a seeded half split (config.seed),
    or every included pair twice when `held_out` is False."""
    n = int(study.included.sum())
    if not held_out:
        return np.arange(n), np.arange(n)
    perm = np.random.default_rng([int(study.config.seed), 46]).permutation(n)
    return np.sort(perm[: n // 2]), np.sort(perm[n // 2 :])


def _pair_ids(study, rows: np.ndarray) -> list[int]:
    return np.flatnonzero(study.included)[rows].tolist()


def _ci(values: np.ndarray, study) -> tuple[float, float, float]:
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    return stats.bootstrap_ci(v, B=int(study.config.n_boot), seed=int(study.config.seed))


def _selection_checks(
    study,
    sel,
    score,
    *,
    what: str,
    n_candidates: int,
    n_scored: int,
    min_units: int,
    held_out: bool,
) -> list[V.Check]:
    tests = 1 if held_out else n_candidates
    return [
        V.held_out(_pair_ids(study, sel), _pair_ids(study, score), subject=f"the {what}"),
        V.multiple_testing(
            tests,
            None,
            subject=(f"the {what}: one held-out test of the one chosen among {n_candidates}")
            if held_out
            else f"the {what}: chosen as the best of {n_candidates} on the scored pairs",
        ),
        V.sampling_units(
            n_scored,
            unit=_UNIT,
            resampled=_UNIT,
            minimum=min_units,
            subject=f"the {what}, scored pairs",
        ),
    ]


def recall_head(study, *, held_out: bool = True, min_units: int = 20) -> V.Verdict:
    """The top attn_z patching head, chosen on one half of the pairs and scored on the other (module
    docstring)."""
    x = study.head_values("patching")
    sel, score = halves(study, held_out=held_out)
    L, H = study.n_layers, study.n_heads
    with np.errstate(invalid="ignore"):
        a, b = np.abs(np.nanmean(x[sel], 0)), np.nanmean(x[score], 0)
    layer, head = np.unravel_index(int(np.nanargmax(a)), (L, H))
    rank = int(stats.rankdata(-np.abs(np.nan_to_num(b)).ravel())[layer * H + head])
    m, lo, hi = _ci(x[score, layer, head], study)
    sign = np.sign(np.nanmean(x[sel, layer, head]))
    supported = bool(rank == 1 and (lo > 0 if sign > 0 else hi < 0))
    checks = _selection_checks(
        study,
        sel,
        score,
        what=f"recall head L{layer}H{head}",
        n_candidates=L * H,
        n_scored=int(np.isfinite(x[score, layer, head]).sum()),
        min_units=min_units,
        held_out=held_out,
    )
    checks.append(
        V.floor_ceiling(
            {f"L{layer}H{head}, scored pairs": abs(m)},
            subject="normalised attn_z patching (0 = corrupt run, 1 = clean run)",
        )
    )
    where = f"on {len(score)} held-out pairs" if held_out else f"on the same {len(score)} pairs"
    return V.Verdict(
        method="lenses",
        claim=f"L{layer}H{head} is the top recall head: patched alone (attn_z) it restores "
        "the most of the logit difference",
        measured=f"chosen on {len(sel)} pairs; {where} it restores {m:+.2f} [{lo:+.2f}, "
        f"{hi:+.2f}] of the logit difference alone, rank {rank} of {L * H} heads",
        supported=supported,
        checks=tuple(checks),
        note="unit: the fact pair (intervals resample pairs); the pairs come from 7 relations, "
        "which share prompt templates, so pairs of one relation are not fully independent",
    )


def recall_layer(study, *, held_out: bool = True, min_units: int = 20) -> V.Verdict:
    """The layer where the clean information moves from the subject's last token to the last token
    (module docstring): chosen on one half, scored on the other."""
    v = study.role_values()
    js, jl = ROLES.index("subject_last"), ROLES.index("last")
    sel, score = halves(study, held_out=held_out)
    L = study.n_layers
    with np.errstate(invalid="ignore"):
        ms, ml = np.nanmean(v[sel, :, js], 0), np.nanmean(v[sel, :, jl], 0)
    after = np.flatnonzero(ml > ms)
    c = int(after[0]) if after.size else -1
    if c < 1:
        return V.Verdict(
            method="lenses",
            claim="the recall moves from the subject's last token to the last token at one layer",
            measured=f"no crossing on the {len(sel)} selection pairs",
            supported=None,
            note="the last token restores more than the subject's last token already at "
            "layer 0, or never",
        )
    d = v[score][:, :, jl] - v[score][:, :, js]  # [n_scored, L]
    (m0, lo0, hi0), (m1, lo1, hi1) = _ci(d[:, c - 1], study), _ci(d[:, c], study)
    supported = bool(hi0 < 0 and lo1 > 0)
    both = np.isfinite(d[:, c - 1]) & np.isfinite(d[:, c])
    checks = _selection_checks(
        study,
        sel,
        score,
        what=f"recall layer (L{c - 1} to L{c})",
        n_candidates=L,
        n_scored=int(both.sum()),
        min_units=min_units,
        held_out=held_out,
    )
    with np.errstate(invalid="ignore"):
        for layer in (c - 1, c):
            checks.append(
                V.floor_ceiling(
                    {
                        "subject_last": float(np.nanmean(v[score, layer, js])),
                        "last": float(np.nanmean(v[score, layer, jl])),
                    },
                    subject=f"normalised resid_pre patching at L{layer}, scored pairs",
                )
            )
    where = f"on {len(score)} held-out pairs" if held_out else f"on the same {len(score)} pairs"
    return V.Verdict(
        method="lenses",
        claim=f"the recall moves from the subject's last token to the last token between L{c - 1} "
        f"and L{c}",
        measured=f"chosen on {len(sel)} pairs; {where} last − subject_last is {m0:+.2f} "
        f"[{lo0:+.2f}, {hi0:+.2f}] at L{c - 1} and {m1:+.2f} [{lo1:+.2f}, {hi1:+.2f}] at L{c}",
        supported=supported,
        checks=tuple(checks),
        note="both differences must exclude 0 with opposite signs (an intersection-union test: "
        "no correction)",
    )


def map_agreement(
    agreement: pd.DataFrame,
    *,
    n_layers: int,
    n_heads: int,
    alpha: float = _ALPHA,
    min_units: int = 20,
) -> list[V.Verdict]:
    """One verdict per row of `FactLensStudy.head_agreement` (module docstring)."""
    out = []
    has_p = "p_partial" in agreement.columns
    n_tests = (
        int(np.isfinite(agreement["p_partial"].to_numpy(float)).sum()) if has_p else len(agreement)
    )
    for r in agreement.itertuples(index=False):
        correction = str(getattr(r, "correction", "") or "")
        corrected = "p_holm" in agreement.columns and correction.lower() not in ("", "none", "nan")
        rho = float(getattr(r, "rho_partial", np.nan))
        p = float(r.p_holm if corrected else getattr(r, "p_partial", r.p_perm))
        supported = (
            None if not (math.isfinite(rho) and math.isfinite(p)) else bool(p < alpha and rho > 0)
        )
        n_eff = float(getattr(r, "n_eff", n_layers * (n_heads - 1)))
        checks = (
            V.multiple_testing(
                n_tests,
                correction if corrected else None,
                subject="the pairs of head maps, read together",
            ),
            V.sampling_units(
                int(r.n_pairs),
                unit=_UNIT,
                resampled=_UNIT,
                minimum=min_units,
                subject="pairs behind the mean maps",
            ),
            V.sampling_units(
                int(n_eff) if math.isfinite(n_eff) else 0,
                unit="within-layer head",
                minimum=min_units,
                subject=f"{r.map_a} vs {r.map_b}: heads, layer levels removed",
            ),
        )
        part = f"partial ρ {rho:+.2f}" if math.isfinite(rho) else "partial ρ undefined"
        p_part = float(getattr(r, "p_partial", np.nan))
        out.append(
            V.Verdict(
                method="lenses",
                claim=f"{r.map_a} and {r.map_b} implicate the same heads (layer partialled out)",
                measured=f"{part} (raw {float(r.rho):+.2f}), p {_p(p_part)} (heads permuted within "
                f"layers), {'Holm p ' + _p(p) if corrected else 'uncorrected'} over {n_tests} "
                "pairs; "
                f"top-{int(r.k)} overlap {float(r.overlap):.1f} (chance "
                f"{float(r.chance_overlap) * int(r.k):.2f} heads)",
                supported=supported,
                checks=checks,
                note="unit for the ρ: the head, permuted within its layer; an external map (the "
                "Truth-Score map) is fixed: its own uncertainty is not in the test",
            )
        )
    return out


def _p(x: float) -> str:
    return "nan" if not math.isfinite(x) else f"{x:.2g}"


def fact_verdicts(
    study,
    agreement: pd.DataFrame | None = None,
    *,
    held_out: bool = True,
    alpha: float = _ALPHA,
    min_units: int = 20,
) -> list[V.Verdict]:
    """The verdicts of a `FactLensStudy` (module docstring): the recall head (when attn_z was
    swept), the recall layer (when resid_pre was), and the agreement of the head maps (`agreement`:
    `study.head_agreement(...)`, with an external Truth-Score map where there is one; computed
    without one when None)."""
    out = []
    if int(study.included.sum()) < 2:
        return out
    sites = study.config.sites
    if "attn_z" in sites:
        out.append(recall_head(study, held_out=held_out, min_units=min_units))
    if "resid_pre" in sites:
        out.append(recall_layer(study, held_out=held_out, min_units=min_units))
    ag = study.head_agreement() if agreement is None else agreement
    if len(ag):
        out += map_agreement(
            ag, n_layers=study.n_layers, n_heads=study.n_heads, alpha=alpha, min_units=min_units
        )
    return out
