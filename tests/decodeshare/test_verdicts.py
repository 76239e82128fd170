"""Issue 46 §2 (DecodeShare): the verdicts of a study and of a layer scan, from constructed results. A floored
controls comparison and a control at 40 % of its target energy are inconclusive, a good result is reproduced,
the energy controls are planned, flagged and matched as `sweep` says, and the rotation null's correction over
layers is read with its resolution."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from interplab.probes.decodeshare import planted_factor_states, shared_subspace
from interplab.probes.decodeshare.subspaces import (
    check_basis, energy_ratio, haar_basis, mean_energy, spectrum_matched_basis,
)
from interplab.probes.decodeshare.sweep import MATCH_TOL, SweepControl, controls_frame, plan_sweep
from interplab.probes.decodeshare.verdicts import bound_margin, layer_verdicts, study_verdicts
from interplab.probes.validity import ValidityReport, null_resolution

BASE = 0.725


def _row(cond, acc, delta=0.0, lo=0.0, hi=0.0, p=1.0, n=240):
    return {"condition": cond, "task": "all", "metric": "gen", "acc": acc, "delta": delta, "delta_lo": lo,
            "delta_hi": hi, "p_vs_baseline": p, "n": n}


def _controls(rows):
    """sweep_controls rows: (control, alpha, alpha_c, target, achieved); evaluated as `SweepControl.usable`."""
    plan = [SweepControl(c, a, np.eye(4)[:, :2], ac, t, e, "") for c, a, ac, t, e in rows]
    return controls_frame(plan)


def _contrasts(rows):
    """sweep_contrasts rows: (control, alpha, acc_shared, acc_control, lo, hi, p)."""
    return pd.DataFrame([{"control": c, "alpha": a, "metric": "gen", "acc_shared": s, "acc_control": k,
                          "control_minus_shared": k - s, "lo": lo, "hi": hi, "p": p, "n": 240}
                         for c, a, s, k, lo, hi, p in rows])


def _study(controls, contrasts, **info):
    """A constructed study: the ablation table (baseline 0.725, shared 0.062 at alpha 1), the sweep tables given."""
    table = pd.DataFrame([_row("baseline", BASE), _row("shared", 0.062, -0.663, -0.72, -0.61, 0.0005),
                          _row("prefill-est", 0.283, -0.44, -0.50, -0.38, 0.0005)])
    inf = {"layer": 15, "k": 131, "k_s": 15, "d": 576, "p_perm": 0.0005, "p_rot": 0.0099, "null_perm_B": 2000,
           "null_rot_B": 100, "metrics": ["gen"], "baseline_acc": {"gen": BASE}, "floor": {"gen": 0.0},
           "k_s_prefill": 3, "angles_decode_vs_prefill": {"mean": 79.0, "n": 3}} | info
    return SimpleNamespace(error=None, info=inf, config=SimpleNamespace(alpha=1.0), table=table,
                           sweep_controls=controls, sweep_contrasts=contrasts, loto=None, loto_contrasts=None,
                           steering=None)


def _verdict(study, control):
    return next(v for v in study_verdicts(study) if f"the {control} control" in v.claim)


GOOD_CONTROLS = [("alpha-match", 0.5, 0.8, 1.0, 1.0), ("k-match", 0.5, 1.0, 1.0, 1.04),
                 ("alpha-match", 1.0, 1.64, 4.0, 4.0), ("k-match", 1.0, 1.0, 4.0, 4.02)]


def test_a_good_result_is_reproduced():
    # off the floor at alpha 0.5: the shared removal takes accuracy to 0.30, the matched controls leave 0.65-0.70
    con = _contrasts([("alpha-match", 0.5, 0.30, 0.70, 0.33, 0.47, 0.0005),
                      ("k-match", 0.5, 0.30, 0.65, 0.28, 0.42, 0.0005),
                      ("k-match", 1.0, 0.06, 0.50, 0.38, 0.50, 0.0005)])
    study = _study(_controls(GOOD_CONTROLS), con)
    for c in ("alpha-match", "k-match"):
        v = _verdict(study, c)
        assert v.outcome == "reproduced", v.reason
        assert {"match_target", "setting_range", "floor_ceiling", "multiple_testing", "sampling_units",
                "held_out"} <= {k.kind for k in v.checks}
    am = _verdict(study, "alpha-match")
    # alpha_C = 1.64 at alpha 1 is a reflection: flagged, not read, and said so
    assert "alpha 1" in am.note and "1.64" in am.note and "alpha 1:" not in am.measured
    report = ValidityReport.of(study_verdicts(study))
    assert report.outcomes["L15: H2, removing Q_S only while decoding lowers accuracy"] == "reproduced"
    assert all("|" not in v.claim + v.measured for v in report.verdict_list())   # markdown table cells


def test_floored_controls_are_inconclusive():
    """Both arms at the generation floor (the audit's alpha = 1 comparison): nothing could show there."""
    con = _contrasts([("k-match", 1.0, 0.062, 0.087, -0.02, 0.07, 0.37)])
    ctrl = _controls([("k-match", 1.0, 1.0, 4.0, 4.02)])
    v = _verdict(_study(ctrl, con), "k-match")
    assert v.outcome == "inconclusive"
    fc = next(c for c in v.failed if c.kind == "floor_ceiling")
    assert "floor" in fc.detail and fc.limit == pytest.approx(bound_margin(BASE, 0.0))
    # the same comparison at the ceiling (neither removal does anything) is inconclusive too
    con = _contrasts([("k-match", 1.0, 0.70, 0.71, -0.03, 0.05, 0.8)])
    v = _verdict(_study(ctrl, con), "k-match")
    assert v.outcome == "inconclusive" and "ceiling" in v.failed[0].detail


def test_a_control_at_40_percent_of_its_target_fails_match_target():
    """k-match reaching only 40 % of the target energy (the audit's L24): flagged, not evaluated, inconclusive."""
    ctrl = _controls([("k-match", 1.0, 1.0, 4.0, 1.6)])
    assert not ctrl["evaluated"].iloc[0] and ctrl["ratio"].iloc[0] == pytest.approx(0.4)
    v = _verdict(_study(ctrl, _contrasts([])), "k-match")
    assert v.outcome == "inconclusive"
    mt = next(c for c in v.failed if c.kind == "match_target")
    assert mt.measured == pytest.approx(0.4) and "1.6" in mt.detail and "4" in mt.detail
    sc = SweepControl("k-match", 1.0, np.eye(3)[:, :1], 1.0, 4.0, 1.6, "")
    assert not sc.usable and not sc.checks()[0].passed


def test_a_reflection_fails_setting_range():
    sc = SweepControl("alpha-match", 1.0, np.eye(3)[:, :1], 2.67, 4.0, 4.0, "")
    mt, sr = sc.checks()
    assert mt.passed and not sr.passed and not sc.usable


def test_the_reverse_and_the_equivalent_are_not_reproduced():
    ctrl = _controls([("alpha-match", 0.5, 0.8, 1.0, 1.0)])
    worse = _contrasts([("alpha-match", 0.5, 0.50, 0.30, -0.27, -0.13, 0.0005)])   # the control hurts more
    assert _verdict(_study(ctrl, worse), "alpha-match").outcome == "not reproduced"
    same = _contrasts([("alpha-match", 0.5, 0.40, 0.41, -0.03, 0.045, 0.6)])       # as much, within 0.05
    assert _verdict(_study(ctrl, same), "alpha-match").outcome == "not reproduced"
    wide = _contrasts([("alpha-match", 0.5, 0.40, 0.43, -0.03, 0.09, 0.3)])        # decides nothing
    v = _verdict(_study(ctrl, wide), "alpha-match")
    assert v.outcome == "inconclusive" and v.supported is None and not v.failed


def test_holm_over_the_alphas_read():
    # p = 0.03 at each of two alphas: significant alone, not after Holm (0.06)
    ctrl = _controls([("alpha-match", 0.25, 0.4, 0.25, 0.25), ("alpha-match", 0.5, 0.8, 1.0, 1.0)])
    con = _contrasts([("alpha-match", 0.25, 0.45, 0.55, 0.01, 0.19, 0.03),
                      ("alpha-match", 0.5, 0.35, 0.45, 0.01, 0.19, 0.03)])
    v = _verdict(_study(ctrl, con), "alpha-match")
    assert v.supported is None and "Holm p 0.06" in v.measured
    assert next(c for c in v.checks if c.kind == "multiple_testing").measured == 2


def test_plan_sweep_on_planted_factors():
    pf = planted_factor_states(n_tasks=4, n_per_task=300, d=48, seed=0)
    ss = shared_subspace(pf.states, rho=0.95, tau_k=1.0)
    e = np.concatenate(list(pf.states.values()))
    plan = plan_sweep(e, ss, [0.0, 0.25, 0.5, 1.0, 1.5])
    assert sorted({c.alpha for c in plan}) == [0.25, 0.5, 1.0, 1.5]            # alpha 0 is the baseline
    es = mean_energy(e, ss.basis)
    for c in plan:
        assert c.target == pytest.approx(c.alpha ** 2 * es)
        if c.control == "alpha-match":
            assert c.achieved == pytest.approx(c.target)                      # exact by construction
            assert c.usable == (c.alpha_c <= 1.0)
        else:
            assert c.alpha_c == 1.0 and c.usable == (abs(c.ratio - 1) <= MATCH_TOL)
    assert not any(c.usable for c in plan if c.alpha == 1.5 and c.control == "alpha-match")


def test_spectrum_matched_basis_follows_the_variance():
    rng = np.random.default_rng(0)
    scales = np.r_[np.full(4, 10.0), np.ones(60)]
    states = {"a": rng.normal(size=(200, 64)) * scales, "b": rng.normal(size=(200, 64)) * scales + 3.0}
    q = spectrum_matched_basis(states, 4, seed=1)
    check_basis(q, 64)
    np.testing.assert_array_equal(q, spectrum_matched_basis(states, 4, seed=1))
    assert not np.allclose(q, spectrum_matched_basis(states, 4, seed=2))
    x = np.concatenate([s - s.mean(0) for s in states.values()])
    # it leans into the four high-variance coordinates; a Haar plane takes about k/d = 1/16 of the energy
    assert energy_ratio(x, q).mean() > 0.5 > 0.2 > energy_ratio(x, haar_basis(64, 4, seed=1)).mean()


def test_steering_verdict_needs_both_nulls():
    st = SimpleNamespace(info={"sh_v": 0.55, "sh_v_haar_mean": 0.16, "p_sh_v_vs_haar": 0.005, "sh_v_var_mean": 0.5,
                               "sh_v_var_q95": 0.62, "p_sh_v_vs_var": 0.3, "n_null": 200})
    study = _study(_controls([]), _contrasts([]))
    study.steering = st
    v = next(v for v in study_verdicts(study) if "steering" in v.claim)
    assert v.outcome == "not reproduced"     # above Haar, but not above subspaces of the states' own spectrum
    st.info["p_sh_v_vs_var"] = 0.005
    assert next(v for v in study_verdicts(study) if "steering" in v.claim).outcome == "reproduced"


def test_null_resolution():
    assert not null_resolution(20, subject="rotation", n_tests=30).passed
    assert null_resolution(2000, subject="permutation", n_tests=30).passed
    assert null_resolution(599, subject="s", n_tests=30).passed and not null_resolution(598, subject="s",
                                                                                          n_tests=30).passed
    assert null_resolution(100, subject="s").passed and not null_resolution(10, subject="s").passed


def _scan(p_perm, p_rot):
    n = len(p_perm)
    return pd.DataFrame({"layer": range(n), "mode": "paper", "threshold": "tau_k=1", "p_perm": p_perm,
                         "p_rot": p_rot})


def test_layer_verdicts_correct_over_layers():
    p_rot = [1 / 21] * 14 + [0.3] * 16
    vs = {v.claim.split(" null")[0].rsplit(" ", 1)[-1]: v for v in
          layer_verdicts(_scan([1 / 2001] * 30, p_rot), null_perm_B=2000, null_rot_B=20)}
    assert vs["permutation"].outcome == "reproduced" and "30 of 30" in vs["permutation"].measured
    rot = vs["rotation"]
    assert rot.outcome == "inconclusive" and rot.failed[0].kind == "null_resolution"
    assert "uncorrected p < 0.05 at 14 layers (0–13)" in rot.measured
    # with enough draws the correction is read: 3 layers at the floor of 999 draws, the rest not significant
    ok = layer_verdicts(_scan([1 / 2001] * 30, [1 / 1000] * 3 + [0.5] * 27), null_perm_B=2000,
                        null_rot_B=999)[1]
    assert ok.outcome == "not reproduced" and "3 of 30 layers" in ok.measured and not ok.failed
