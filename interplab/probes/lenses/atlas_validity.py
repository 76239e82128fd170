"""Verdicts of an atlas (issue 46 §2): does each pair of maps agree once depth is partialled out,
and could the run have shown it?

One verdict per row of `Atlas.agreement` with a defined depth-partialled ρ. The claim is agreement:
two maps implicate the same heads (layer x head) or vary together over layers (layer). The decision
rule: the Holm-adjusted p of the depth-partialled ρ (against the null that keeps the layer
structure, `atlas.depth_partialled`) below `alpha` with ρ > 0. The checks:

- multiple_testing: the pairs of one atlas are read together, so their p-values must be corrected
  (the table's `correction`; a table without one fails);
- sampling_units: the effective number of independent units behind the ρ. Heads, permuted within
  their layer, count as n − L (the residual degrees of freedom after the layer levels); a layer
  profile counts as the effective n of its depth-detrended profiles (`stats.effective_n`), never as
  its number of layers; `min_units` (20 by default, `validity.sampling_units`'s default) must be
  reached;
- floor_ceiling: a map that reads patching needs a pair that moves the metric (clean − corrupt at
  least `min_span` logits: patching is normalised by that difference), and the per-layer patching
  profile (max over positions) must not sit at its ceiling of 1 (or floor of 0) at every layer.
"""

from __future__ import annotations

import math

import numpy as np

from interplab.probes import validity as V

_ALPHA = 0.05
_MIN_SPAN = 1.0  # logits; the lenses-facts study's default min_span for the same reason
_PATCHING = ("patching", "patching_resid")


def _claim(axis: str, a: str, b: str) -> str:
    if axis == "layer x head":
        return f"{a} and {b} implicate the same heads (layer partialled out)"
    return f"{a} and {b} vary together over layers (depth partialled out)"


def _p(x: float) -> str:
    return "nan" if not math.isfinite(x) else f"{x:.2g}"


def _units(axis: str, row, min_units: int) -> V.Check:
    if axis == "layer x head":
        return V.sampling_units(
            int(row.n_eff),
            unit="within-layer head",
            minimum=min_units,
            subject=f"{row.map_a} vs {row.map_b}: heads, layer levels removed",
        )
    return V.sampling_units(
        math.floor(row.n_eff) if math.isfinite(row.n_eff) else 0,
        unit="effective independent layer",
        minimum=min_units,
        subject=f"{row.map_a} vs {row.map_b}: {int(row.n)} autocorrelated layers",
    )


def _patching_checks(atlas, row, min_span: float) -> list[V.Check]:
    out = []
    names = {row.map_a, row.map_b}
    if names & set(_PATCHING):
        m = atlas.lens_metrics or {}
        span = float(m.get("clean", np.nan)) - float(m.get("corrupt", np.nan))
        out.append(
            V.floor_ceiling(
                {"clean - corrupt logit difference": span},
                floor=0.0,
                ceiling=None,
                margin=min_span,
                subject="the lens pair (patching is normalised by it)",
            )
        )
    if "patching_resid" in names and "patching_resid" in atlas.layer_maps:
        prof = atlas.layer_maps["patching_resid"]
        out.append(
            V.floor_ceiling(
                {"lowest layer": float(np.min(prof)), "highest layer": float(np.max(prof))},
                subject="max |patching| over positions, per layer (normalised)",
            )
        )
    return out


def atlas_verdicts(
    atlas,
    *,
    alpha: float = _ALPHA,
    min_units: int = 20,
    min_span: float = _MIN_SPAN,
    method: str = "atlas",
) -> list[V.Verdict]:
    """The verdicts of one `Atlas` (module docstring): one per pair of maps whose
    depth-partialled ρ is defined."""
    ag = atlas.agreement
    verdicts = []
    for row in ag.itertuples(index=False):
        rho = float(getattr(row, "rho_partial", np.nan))
        if not math.isfinite(float(row.rho)) and not math.isfinite(rho):
            continue  # a constant map: no ranking to compare
        correction = str(getattr(row, "correction", "") or "")
        corrected = "p_holm" in ag.columns and correction.lower() not in ("", "none", "nan")
        p = float(row.p_holm if corrected else getattr(row, "p_partial", np.nan))
        n_tests = (
            int(np.isfinite(ag["p_partial"].to_numpy(float)).sum())
            if "p_partial" in ag.columns
            else len(ag)
        )
        checks = [
            V.multiple_testing(
                n_tests,
                correction if corrected else None,
                subject="the atlas's pairs of maps, read together",
            ),
            _units(row.axis, row, min_units),
            *_patching_checks(atlas, row, min_span),
        ]
        supported = (
            None if not (math.isfinite(rho) and math.isfinite(p)) else bool(p < alpha and rho > 0)
        )
        part = (
            f"partial ρ {rho:+.2f}"
            if math.isfinite(rho)
            else "partial ρ undefined (one map's ranks are depth)"
        )
        null = "heads permuted within layers" if row.axis == "layer x head" else "phase surrogates"
        measured = (
            f"{part} (raw {float(row.rho):+.2f}), p {_p(float(row.p_partial))} ({null}), "
            f"{'Holm p ' + _p(p) if corrected else 'uncorrected'} over {n_tests} pairs"
        )
        if row.axis == "layer x head":
            if math.isfinite(float(row.topk_overlap)):
                k = atlas.config.top_k if atlas.config is not None else 5
                measured += f"; top-{k} overlap {float(row.topk_overlap):.1f}"
            note = (
                "unit: the head, permuted within its layer (a level all heads of a layer share "
                "cannot make agreement); the lens maps are one clean / corrupt pair"
            )
        else:
            measured += f"; n_eff {float(row.n_eff):.1f} of {int(row.n)} layers"
            note = (
                "unit: the effective independent layer of the depth-detrended profiles (Pyper & "
                "Peterman); null: phase-randomised surrogates, which keep the profile's "
                "autocorrelation"
            )
        verdicts.append(
            V.Verdict(
                method=method,
                claim=_claim(row.axis, row.map_a, row.map_b),
                measured=measured,
                supported=supported,
                checks=tuple(checks),
                note=note,
            )
        )
    return verdicts
