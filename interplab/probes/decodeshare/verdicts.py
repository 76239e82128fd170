"""The verdicts of a DecodeShare run (issue 46): what its numbers say about the paper's claims, and the checks of
the run behind them (`interplab.probes.validity`). Pure functions of saved results, so a loaded run gives the same
report: `study_verdicts(study)` for the intervention study (`run_study`, experiment `decodeshare`) and
`layer_verdicts(summary, ...)` for the layer scan (`scan_layers`, experiment `decodeshare-layers`).

Decision rules, fixed here and never tuned to a run:

* Sampling unit: the prompt item (one evaluation prompt of one task, scored once). Every accuracy interval and
  sign-flip test resamples items, paired across conditions; generated tokens are never the unit.
* Significance: LEVEL = 0.05, two-sided paired sign-flip tests; Monte-Carlo null p-values are (1 + #)/(1 + B).
* Floor and ceiling: in a comparison of two removals, an arm sits at the floor (ceiling) when it is within
  max(0.05, FLOOR_ROOM x (baseline - floor)) of it; the floor is 0 for generation exact match and the
  candidates' chance rate for forced choice; the ceiling is the unedited model's accuracy (both removals
  leaving the model as it was shows nothing either). A comparison with both arms at one bound cannot show a
  difference.
* Energy controls (the alpha sweep): the whole sweep is read, no alpha is chosen. An alpha is read for a control
  when the control meets its energy target within ±10 % with a strength in [0, 1]; that is decided on the
  calibration states, before any item is scored. p-values are Holm-adjusted over the alphas read (family-wise:
  each alpha's difference is read on its own). Reproduced: some alpha shows the shared removal significantly
  more harmful and none the reverse. Not reproduced: some alpha shows the reverse and none the claim, or at every
  alpha read off floor and ceiling the control's accuracy minus the shared removal's has its upper 95 % bound
  below EQUIV (the control does as much). Otherwise, or with a failed check, inconclusive.
* Layers: p-values over the scanned layers are Holm-adjusted (each layer's result is read on its own, so the
  family-wise rate is the one to control; BH would bound only the share of false layers among those called).
  A null of B draws cannot reach p < 1/(B+1); `null_resolution` fails when the corrected floor is above LEVEL.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from interplab.probes.decodeshare.sweep import ENERGY_CONTROLS, MATCH_TOL, control_checks
from interplab.probes.stats import holm_adjust
from interplab.probes.validity import (
    Check, Verdict, floor_ceiling, held_out, match_target, multiple_testing, null_resolution, sampling_units,
    setting_range,
)

__all__ = ["LEVEL", "EQUIV", "FLOOR_ROOM", "ORTHOGONAL_DEG", "METHOD", "study_verdicts", "layer_verdicts",
           "bound_margin"]

METHOD = "DecodeShare"
LEVEL = 0.05          # significance level of every test read here
EQUIV = 0.05          # "does as much": the upper 95 % bound of (control - shared) accuracy below this
FLOOR_ROOM = 0.2      # an arm within a fifth of the baseline's room above the floor sits at the floor
MIN_MARGIN = 0.05     # ... and never within less than 0.05
ORTHOGONAL_DEG = 75.0  # "nearly orthogonal": a mean principal angle of at least this (the paper: 79.7°)
UNIT = "prompt item"


def bound_margin(baseline: float, floor: float) -> float:
    """How close to the floor (or to the unedited accuracy) an arm must be to count as sitting there."""
    return max(MIN_MARGIN, FLOOR_ROOM * (float(baseline) - float(floor)))


def _iv(x: float, lo: float, hi: float) -> str:
    return f"{x:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def _items(n: int, subject: str) -> Check:
    return sampling_units(int(n), unit=UNIT, subject=subject, resampled=UNIT)


def _metric(study) -> str:
    return "gen" if "gen" in study.info.get("metrics", ["fc", "gen"]) else "fc"


def _name(metric: str) -> str:
    return {"gen": "generation exact match", "fc": "forced choice"}[metric]


def _pooled(df: pd.DataFrame, condition: str, metric: str) -> pd.Series:
    r = df[(df["condition"] == condition) & (df["task"] == "all") & (df["metric"] == metric)]
    if r.empty:
        raise KeyError(f"no pooled {metric} row for {condition!r}")
    return r.iloc[0]


# ----------------------------------------------------------------------------------------------- the study
def study_verdicts(study) -> list[Verdict]:
    """Every claim the study's sections can speak to (a section that was not run gives no verdict): H1 at the
    study layer, H2 removal, H2 against each energy control over the alpha sweep, LOTO against Haar and
    energy-matched Haar, H3, and the steering overlap against Haar and covariance-matched nulls."""
    if study.error is not None:
        return []
    m = _metric(study)
    out = [_h1_layer(study)]
    if study.table is not None:
        out.append(_removal(study, m))
    if study.sweep_controls is not None and study.sweep_contrasts is not None:
        out += [_energy_control(study, c, m) for c in ENERGY_CONTROLS]
    if study.loto_contrasts is not None and len(study.loto_contrasts):
        out += [_loto(study, "loto-haar", m), _loto(study, "loto-haar-energy", m)]
    if study.table is not None:
        out.append(_h3(study, m))
    if study.steering is not None and "p_sh_v_vs_var" in study.steering.info:
        out.append(_steering(study))
    return out


def _tag(study) -> str:
    return f"L{study.info['layer']}"


def _h1_layer(study) -> Verdict:
    i = study.info
    p1, p2 = i["p_perm"], i.get("p_rot")
    b2 = int(i.get("null_rot_B", 0) or 0)
    checks = [null_resolution(int(i.get("null_perm_B", 0) or 0), subject="permutation null"),
              null_resolution(b2, subject="rotation null"),
              multiple_testing(2, "intersection-union (both nulls must reject, each at 0.05)",
                               subject="two nulls")]
    sup = None if p2 is None else bool(p1 < LEVEL and p2 < LEVEL)
    measured = (f"k_S = {i['k_s']} of k = {i['k']} (d = {i['d']}); p_perm {p1:.2g}, "
                + (f"p_rot {p2:.2g} ({b2} draws)" if p2 is not None else "rotation null not run"))
    return Verdict(METHOD, f"{_tag(study)}: H1, a decode subspace shared by every task, significant under both "
                           "nulls", measured, sup, tuple(checks))


def _removal(study, m: str) -> Verdict:
    s = _pooled(study.table, "shared", m)
    base = study.info["baseline_acc"][m]
    alpha = float(study.config.alpha)
    checks = [floor_ceiling({"baseline": base, "shared": s["acc"]}, subject=f"{m}, baseline vs shared",
                            floor=study.info["floor"][m]),
              setting_range(alpha, 0, 1, subject="shared removal", what="alpha"),
              _items(s["n"], f"{m} accuracy")]
    sup = True if (s["delta_hi"] < 0 and s["p_vs_baseline"] < LEVEL) else (
        False if s["delta_lo"] > -EQUIV else None)
    measured = (f"{_name(m)} {base:.3f} → {s['acc']:.3f} at alpha {alpha:g}: "
                f"{_iv(s['delta'], s['delta_lo'], s['delta_hi'])}, p {s['p_vs_baseline']:.2g} ({int(s['n'])} items)")
    return Verdict(METHOD, f"{_tag(study)}: H2, removing Q_S only while decoding lowers accuracy", measured, sup,
                   tuple(checks))


def _energy_control(study, control: str, m: str) -> Verdict:
    sc = study.sweep_controls[study.sweep_controls["control"] == control].sort_values("alpha")
    read = sc[sc["evaluated"].astype(bool)]
    claim = (f"{_tag(study)}: H2, removing Q_S hurts more than removing the same energy with the {control} "
             "control (alpha sweep)")
    unread = [f"alpha {r['alpha']:g} ({'; '.join(c.detail for c in control_checks(r) if not c.passed)})"
              for _, r in sc.iterrows() if not r["evaluated"]]
    note = ("not read: " + "; ".join(unread)) if unread else ""
    if read.empty:
        checks = tuple(c for _, r in sc.iterrows() for c in control_checks(r))
        return Verdict(METHOD, claim, f"no alpha of {sorted(sc['alpha'].tolist())} gives a usable {control} "
                                      "control", None, checks, note)
    con = study.sweep_contrasts
    con = con[(con["control"] == control) & (con["metric"] == m) & con["alpha"].isin(read["alpha"])]
    con = con.sort_values("alpha").reset_index(drop=True)
    padj = holm_adjust(con["p"].to_numpy())
    base, floor = study.info["baseline_acc"][m], study.info["floor"][m]
    margin = bound_margin(base, floor)
    bounds = [floor_ceiling({"shared": r["acc_shared"], control: r["acc_control"]},
                            subject=f"{m}, shared vs {control} at alpha {r['alpha']:g}", floor=floor,
                            ceiling=base, margin=margin) for _, r in con.iterrows()]
    best = max(bounds, key=lambda c: c.measured if np.isfinite(c.measured) else -np.inf)
    checks = [c for _, r in read.iterrows() for c in control_checks(r)]
    checks += [best, multiple_testing(len(con), "Holm over the alphas read", subject=f"{control} sweep"),
               _items(con["n"].min(), f"{m} accuracy"),
               held_out((), range(int(con["n"].min())), subject="strength alpha (the whole sweep is read)")]
    d = con["control_minus_shared"].to_numpy()
    sig = padj < LEVEL
    pos, neg = bool(np.any(sig & (d > 0))), bool(np.any(sig & (d < 0)))
    off = [b.passed for b in bounds]
    same = any(off) and all(h < EQUIV for h, o in zip(con["hi"], off) if o)
    sup = True if (pos and not neg) else (False if (neg and not pos) or (not pos and not neg and same) else None)
    measured = "; ".join(
        f"alpha {r['alpha']:g}: shared {r['acc_shared']:.3f} vs {r['acc_control']:.3f}, control − shared "
        f"{_iv(r['control_minus_shared'], r['lo'], r['hi'])}, Holm p {q:.2g}"
        for (_, r), q in zip(con.iterrows(), padj))
    return Verdict(METHOD, claim, f"{_name(m)}: {measured}", sup, tuple(checks), note)


def _loto(study, control: str, m: str) -> Verdict:
    vs = study.loto_contrasts
    r = vs[(vs["condition"] == control) & (vs["metric"] == m)].iloc[0]
    a_ctrl, d = r["acc"], r["delta"]          # delta = control - LOTO removal, paired over the held-out items
    a_rem = a_ctrl - d
    base, floor = study.info["baseline_acc"][m], study.info["floor"][m]
    checks = [floor_ceiling({"loto-removed": a_rem, control: a_ctrl}, subject=f"{m}, held-out tasks",
                            floor=floor, ceiling=base, margin=bound_margin(base, floor)),
              _items(r["n"], f"{m} accuracy, held-out tasks")]
    what = "a Haar subspace of the same size"
    if control == "loto-haar-energy":
        lo = study.loto
        a_c = float(lo.loc[lo["condition"] == control, "alpha"].max())
        checks.append(setting_range(a_c, 0, 1, subject="energy-matched Haar (largest fold alpha_C)",
                                    what="control strength alpha_C"))
        what = "a Haar subspace removing the same energy"
    sup = True if (r["delta_lo"] > 0 and r["p_vs_baseline"] < LEVEL) else (
        False if r["delta_hi"] < EQUIV else None)
    measured = (f"{_name(m)} pooled over the held-out tasks: Q_S of the other tasks {a_rem:.3f}, control "
                f"{a_ctrl:.3f}; control − removal {_iv(d, r['delta_lo'], r['delta_hi'])}, p "
                f"{r['p_vs_baseline']:.2g} ({int(r['n'])} items)")
    return Verdict(METHOD, f"{_tag(study)}: H2 LOTO, the other tasks' Q_S hurts a held-out task more than {what}",
                   measured, sup, tuple(checks))


def _h3(study, m: str) -> Verdict:
    i = study.info
    a = i["angles_decode_vs_prefill"]
    p = _pooled(study.table, "prefill-est", m)
    checks = [match_target(i["k_s_prefill"], i["k_s"], subject="prefill-estimated basis",
                           quantity="prefill-shared directions (the rest is padding)", rel_tol=MATCH_TOL),
              _items(p["n"], f"{m} accuracy")]
    harmless = p["delta_lo"] > -EQUIV
    harmful = p["delta_hi"] < -EQUIV
    sup = True if (a["mean"] >= ORTHOGONAL_DEG and harmless) else (
        False if (a["mean"] < ORTHOGONAL_DEG or harmful) else None)
    measured = (f"mean decode-vs-prefill angle {a['mean']:.1f}° over {a['n']} directions; prefill-est removal "
                f"{_name(m)} {_iv(p['delta'], p['delta_lo'], p['delta_hi'])} vs baseline")
    return Verdict(METHOD, f"{_tag(study)}: H3, the prefill-estimated subspace is nearly orthogonal to Q_S and "
                           "nearly harmless", measured, sup, tuple(checks))


def _steering(study) -> Verdict:
    s = study.steering.info
    b = int(s.get("n_null", 0))
    checks = [null_resolution(b, subject="Haar and covariance-matched nulls"),
              multiple_testing(2, "intersection-union (both nulls must reject, each at 0.05)",
                               subject="two nulls")]
    sup = bool(s["p_sh_v_vs_haar"] < LEVEL and s["p_sh_v_vs_var"] < LEVEL)
    measured = (f"sh(v) {s['sh_v']:.3f}; Haar mean {s['sh_v_haar_mean']:.3f} (p {s['p_sh_v_vs_haar']:.2g}); "
                f"covariance-matched mean {s['sh_v_var_mean']:.3f}, 95th pct {s['sh_v_var_q95']:.3f} "
                f"(p {s['p_sh_v_vs_var']:.2g}); {b} draws each")
    return Verdict(METHOD, f"{_tag(study)}: a task steering vector lies in Q_S more than in random subspaces "
                           "(Haar and covariance-matched)", measured, sup, tuple(checks))


# ----------------------------------------------------------------------------------------------- the layer scan
def layer_verdicts(summary: pd.DataFrame, *, null_perm_B: int, null_rot_B: int, mode: str = "paper",
                   threshold: str = "tau_k=1") -> list[Verdict]:
    """H1 at every scanned layer under each null, Holm-adjusted over the layers (`LayerScan.summary` rows of one
    estimator mode and threshold)."""
    t = summary[(summary["mode"] == mode) & (summary["threshold"] == threshold)].sort_values("layer")
    out = []
    for null, col, b in (("permutation", "p_perm", null_perm_B), ("rotation", "p_rot", null_rot_B)):
        p = t[col].to_numpy(float)
        if not np.isfinite(p).any():
            continue
        adj = holm_adjust(p)
        n = int(np.isfinite(p).sum())
        layers = t["layer"].to_numpy(int)
        raw = layers[p < LEVEL]
        checks = (multiple_testing(n, "Holm over layers", subject=f"{null} null, {n} layers"),
                  null_resolution(int(b), n_tests=n, subject=f"{null} null, {n} layers"))
        sup = bool(np.all(adj[np.isfinite(adj)] < LEVEL))
        measured = (f"{int((adj < LEVEL).sum())} of {n} layers at Holm-adjusted p < {LEVEL:g} (smallest "
                    f"{np.nanmin(adj):.3g}); uncorrected p < {LEVEL:g} at {len(raw)} layers"
                    + (f" ({_ranges(raw)})" if len(raw) else "") + f"; {b} null draws")
        out.append(Verdict(METHOD, f"H1 ({mode} estimator, {threshold}): the shared set is significant under the "
                                   f"{null} null at every layer", measured, sup, checks))
    return out


def _ranges(xs) -> str:
    """[0, 1, 2, 5] -> '0–2, 5'."""
    xs = sorted(int(x) for x in xs)
    runs, start = [], xs[0]
    for a, b in zip(xs, xs[1:] + [None]):
        if b != a + 1:
            runs.append(f"{start}–{a}" if a != start else f"{a}")
            start = b
    return ", ".join(runs)
