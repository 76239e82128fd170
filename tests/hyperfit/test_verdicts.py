"""Issue 46 §2 (Hyperfitting): the verdicts of the headline experiments and the checks behind them.
Each check fires on a constructed bad run (an inert injection arm, a temperature control that missed
its entropy target, collapsed generations, a setting chosen on the scored texts, one seed, an
estimator set by one massive coordinate) and stays quiet on a good one (constructed results, and the
text-base / text-hyperfit organisms)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from interplab.probes.hyperfit import verdicts as HV
from interplab.probes.hyperfit.geometry import participation_ratio, pr_leave_one_out
from interplab.probes.validity import ValidityReport

TARGETS = ("seed0", "seed1", "seed2")


def _replies(n: int, tag: str) -> list[str]:
    return [f"{tag} reply {i} about topic {i * 7 % 13}" for i in range(n)]


def fake_eval(
    *,
    static_changed=(0.0, 0.2, 0.6, 0.9),
    tstar_entropy=1.40,
    overlap=False,
    n_targets=3,
    collapsed=False,
    static_nll=2.0,
) -> SimpleNamespace:
    """A constructed `HyperfitEvalResult`: base greedy TTR 0.29, hyperfitted seeds 0.48-0.52 (fewer
    loops), T* sampled 0.35 [0.33, 0.37], static strengths that change `static_changed` of the
    replies."""
    rows = [
        {"setting": "base greedy", "kind": "base", "ttr": 0.29, "loop_rate": 0.2, "entropy": 3.1}
    ]
    rows.append(
        {
            "setting": "base sampled T*=0.650",
            "kind": "temperature",
            "ttr": 0.35,
            "ttr_lo": 0.33,
            "ttr_hi": 0.37,
            "loop_rate": 0.05,
            "entropy": tstar_entropy,
            "n_seeds": 3,
        }
    )
    for a, c in zip((0.01, 0.1, 0.5, 2.0), static_changed):
        rows.append(
            {
                "setting": f"static α={a:g}",
                "kind": "static",
                "alpha": a,
                "ttr": 0.29 + c / 20,
                "loop_rate": 0.2,
                "entropy": 3.1,
                "changed_share": c,
            }
        )
    names = TARGETS[:n_targets]
    for i, n in enumerate(names):
        rows.append(
            {
                "setting": n,
                "kind": "target",
                "ttr": 0.48 + 0.02 * i,
                "loop_rate": 0.05 + 0.01 * i,
                "entropy": 1.40 + 0.01 * i,
            }
        )
    rng = np.random.default_rng(0)
    replies = {r["setting"]: _replies(20, r["setting"]) for r in rows}
    nll = {r["setting"]: rng.normal(2.0, 0.2, 20) for r in rows}
    for r in rows:
        if r["kind"] == "static":
            nll[r["setting"]] = rng.normal(static_nll, 0.2, 20)
    if collapsed:
        for n in names:
            replies[n] = ["the the the the"] * 20
    ranks = {
        n: np.where(rng.random((20, 16)) < 0.4, rng.integers(2, 400, (20, 16)), 1) for n in names
    }
    tf = [f"text {i}" for i in range(8)]
    scored = (
        tf[:2] + [f"other {i}" for i in range(10)] if overlap else [f"other {i}" for i in range(10)]
    )
    return SimpleNamespace(
        table=pd.DataFrame(rows),
        replies=replies,
        reply_nll=nll,
        reference_nll=rng.normal(3.8, 0.4, 32),
        units={"selected_on": tf, "scored_on": scored},
        match=SimpleNamespace(T=0.65),
        spearman={"ttr": -0.4},
        ranks=ranks,
    )


def _by_claim(verdicts):
    return {
        v.claim.split(" ", 1)[0] if v.claim[0].isdigit() else v.claim.split(":")[0][:20]: v
        for v in verdicts
    }


def _failed(v) -> set[str]:
    return {c.kind for c in v.failed}


def test_a_good_constructed_eval_is_decided_with_every_check_quiet():
    vs = HV.eval_verdicts(fake_eval())
    assert all(not v.failed for v in vs), [v.reason for v in vs]
    by = {v.claim[:2]: v for v in vs}
    assert by["1."].outcome == "reproduced" and by["2."].outcome == "reproduced"
    assert vs[0].outcome == "reproduced" and vs[-1].outcome == "reproduced"
    ValidityReport.of(vs).markdown()  # one row per claim


def test_an_inert_static_arm_is_flagged():
    v = next(
        v
        for v in HV.eval_verdicts(fake_eval(static_changed=(0, 0, 0, 0)))
        if v.claim.startswith("2.")
    )
    assert v.outcome == "inconclusive" and _failed(v) == {"arm_effect"}
    # an arm that changes output only where its replies are degenerate tests nothing either
    v = next(v for v in HV.eval_verdicts(fake_eval(static_nll=9.0)) if v.claim.startswith("2."))
    assert (
        v.outcome == "inconclusive"
        and "arm_effect" in _failed(v)
        and "no usable setting" in v.reason
    )


def test_a_temperature_control_that_missed_its_entropy_target_is_flagged():
    v = next(v for v in HV.eval_verdicts(fake_eval(tstar_entropy=2.5)) if v.claim.startswith("1."))
    assert v.outcome == "inconclusive" and _failed(v) == {"match_target"}
    assert "ratio 1.77" in v.reason


def test_settings_chosen_on_the_scored_texts_one_seed_and_collapsed_replies_are_flagged():
    v = next(v for v in HV.eval_verdicts(fake_eval(overlap=True)) if v.claim.startswith("1."))
    assert _failed(v) == {"held_out"}
    vs = HV.eval_verdicts(fake_eval(n_targets=1))
    assert all("sampling_units" in _failed(v) for v in vs)
    vs = HV.eval_verdicts(fake_eval(collapsed=True))
    assert all("repeated_reply" in _failed(v) for v in vs if not v.claim.startswith("2."))


def test_pr_leave_one_out_is_exact_and_flags_one_massive_coordinate():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 12))
    X[:, 3] *= 30.0  # one massive coordinate
    C = torch.as_tensor(np.cov(X, rowvar=False))
    for std in (False, True):
        change, j = pr_leave_one_out(C, std)
        pr = participation_ratio(X, standardize=std)
        brute = [
            abs(participation_ratio(np.delete(X, k, 1), standardize=std) / pr - 1)
            for k in range(12)
        ]
        assert float(change) == pytest.approx(max(brute), rel=1e-9) and int(j) == int(
            np.argmax(brute)
        )
    raw, j = pr_leave_one_out(C)
    std, _ = pr_leave_one_out(C, True)
    assert int(j) == 3 and float(raw) > HV.MAX_COORDINATE_CHANGE > float(std)


def fake_geometry(*, massive: bool) -> pd.DataFrame:
    """3 seeds x 4 blocks + final norm, teacher-forced with and without position 0: the last block
    expands."""
    rows = []
    for seed, t in enumerate(TARGETS):
        for bos in (False, True):
            for layer, site, d in (
                (0, "resid_post", 0.0),
                (1, "resid_post", 2.0),
                (2, "resid_post", 4.0),
                (3, "resid_post", 30.0),
                (3, "final_norm", 25.0),
            ):
                d = d + 0.5 * seed - (25 if bos else 0)
                rows.append(
                    {
                        "target": t,
                        "tokens": "teacher_forced",
                        "bos": bos,
                        "layer": layer,
                        "site": site,
                        "pr_a": 9.0,
                        "pr_b": 9.0 + 2 * d,
                        "delta_pr": 2 * d,
                        "pr_std_a": 60.0,
                        "pr_std_b": 60.0 + d,
                        "pr_loo_a": 1.2 if massive else 0.01,
                        "pr_loo_dim_a": 17,
                        "pr_loo_b": 0.01,
                        "pr_loo_dim_b": 4,
                        "pr_std_loo_a": 0.004,
                        "pr_std_loo_dim_a": 5,
                        "pr_std_loo_b": 0.004,
                        "pr_std_loo_dim_b": 6,
                    }
                )
    return pd.DataFrame(rows)


def test_geometry_verdicts_flag_an_estimator_set_by_one_massive_coordinate():
    headline, raw = HV.geometry_verdicts(fake_geometry(massive=True))
    assert (
        "standardised" in headline.claim
        and headline.outcome == "reproduced"
        and not headline.failed
    )
    assert raw.outcome == "inconclusive" and _failed(raw) == {"outlier_dominance"}
    assert "coordinate 17" in raw.reason
    headline, raw = HV.geometry_verdicts(fake_geometry(massive=False))
    assert headline.outcome == raw.outcome == "reproduced"
    assert "with position 0 +5.5" in headline.measured  # reported beside the headline
    one = fake_geometry(massive=False)
    assert all(
        v.outcome == "inconclusive" for v in HV.geometry_verdicts(one[one["target"] == "seed0"])
    )


def test_the_organisms_pass_the_eval_checks_and_the_fixed_injection_moves_the_output():
    """text-base / text-hyperfit (one recipe, named three times so the seed check has its 3 units):
    the generation, held-out, entropy-match and injection checks stay quiet; the static delta
    promotes what the target promotes."""
    import interplab
    from interplab.probes.hyperfit import (
        EvalConfig,
        compare_teacher_forced,
        evaluate_settings,
        heldout_texts,
        static_delta,
    )

    base, hyper = interplab.load_model("zoo:text-base"), interplab.load_model("zoo:text-hyperfit")
    texts = heldout_texts(24)
    cmp = compare_teacher_forced(base, hyper, texts[:8])
    fixed, old = static_delta(cmp, 100), static_delta(cmp, 100, reference="log_softmax")
    assert (fixed[fixed != 0] > 0).all() and (old[old != 0] < 0).all()  # the old delta demoted them
    res = evaluate_settings(
        base,
        {n: hyper for n in TARGETS},
        texts,
        EvalConfig(
            n_prompts=8,
            new_tokens=16,
            tf_texts=8,
            seeds=3,
            alphas=[2.0],
            sample_t1=False,
            batch_size=8,
        ),
    )
    assert not set(res.units["selected_on"]) & set(res.units["scored_on"])
    assert res.table.set_index("setting").loc["static α=2", "changed_share"] >= 0.5
    for v in HV.eval_verdicts(res):
        assert not v.failed, v.reason
