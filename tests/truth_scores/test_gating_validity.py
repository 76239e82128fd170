"""TruthProbe gating checks itself (issue 46 §1–2): a constructed collapsed-gating result (every gated reply one
string, as the committed α = 6 run) is inconclusive; a constructed good one is not; the tune-split selection never
picks a degenerate or out-of-range setting; a run's verdicts come back from its saved report."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from interplab.core.errors import ConfigError
from interplab.probes.stats import intervals
from interplab.probes.truth.facts_gating import READOUTS, FactsGating
from interplab.probes.truth.gating_select import (PAPER_ALPHA_RANGES, gate_grid, select_setting, setting_key,
                                                  tune_choice)
from interplab.probes.truth.gating_verdicts import MIN_GAIN, claims, gating_verdicts

N = 80   # eval facts


def _replies(cond: str, flags: np.ndarray, *, collapsed: bool, rng, first: int = 100) -> pd.DataFrame:
    rows = []
    for i, ok in enumerate(flags):
        if collapsed:
            reply, toks, nll = "embrance" * 12, " ".join(["4123"] * 12), 11.0 + rng.normal(0, 0.1)
        else:   # fluent, fact-specific replies: distinct words and tokens, NLL like the ungated model's own
            reply = f"The capital of country {i} is city {i if ok else i + 1000}."
            toks, nll = " ".join(str(t) for t in (5, 6, 7, 8, 1000 + i, 9, 10, 2000 + i)), 2.0 + rng.normal(0, 0.3)
        rows.append({"split": "eval", "condition": cond, "mode": "normalize", "alpha": 0.2, "index": first + i,
                     "relation": "capital", "reply": reply, "tokens": toks, "nll": nll, "named": None,
                     "context": bool(ok), "memory": False, "distractor": False})
    return pd.DataFrame(rows)


def constructed(*, collapsed: bool = False, gain: float = 0.3, p: float = 0.01, alpha: float = 0.2,
                mode: str = "normalize", allow: bool = False, seed: int = 0) -> FactsGating:
    """A FactsGating as facts_gating would return it: eval facts 100.., tune 60.., probe 0..; ungated names the
    context in 30% of replies, gated in 30% + gain (collapsed: every gated and shuffled reply one string)."""
    rng = np.random.default_rng(seed)
    u = rng.random(N) < 0.3
    g = np.zeros(N, bool) if collapsed else (u | (rng.random(N) < gain / 0.7))
    arms = {"ungated": u.astype(float), "gated": g.astype(float)}
    ev, diff = [], []
    for readout in READOUTS:
        for cond, x in arms.items():
            iv = intervals(x, method="bootstrap", B=500, seed=0)
            ev.append({"condition": cond, "readout": readout, "rate": iv.mean, "lo": iv.lo, "hi": iv.hi, "n": N})
        iv = intervals(arms["gated"] - arms["ungated"], method="bootstrap", B=500, seed=0)
        diff.append({"readout": readout, "gated_minus_ungated": iv.mean, "lo": iv.lo, "hi": iv.hi})
    null = np.full(99, 0.3) if p < 0.05 else np.full(99, 0.9)
    replies = pd.concat([_replies("ungated", u, collapsed=False, rng=rng), _replies("gated", g, collapsed=collapsed,
                                                                                   rng=rng)]
                        + [_replies(f"shuffled {k}", u, collapsed=collapsed, rng=rng) for k in (1, 2)],
                        ignore_index=True)
    tune = pd.DataFrame([{"mode": "ungated", "alpha": 0.0, "in_range": True, "allowed": True, "eligible": True},
                         {"mode": mode, "alpha": alpha, "in_range": True, "allowed": True, "eligible": True}])
    return FactsGating(
        model="real:smollm2-135m-instruct", score_source="self", scores=np.full((3, 4), 0.6),
        facts={"probe": list(range(60)), "tune": list(range(60, 100)), "eval": list(range(100, 100 + N))},
        alpha_ranges={k: list(v) for k, v in PAPER_ALPHA_RANGES.items()}, allow_out_of_range=allow, tune=tune,
        select_by="generated_context", mode=mode, alpha=alpha,
        choice={"mode": mode, "alpha": alpha, "rate": 0.5, "diff": 0.1, "lo": 0.02, "hi": 0.2, "n": 40,
                "within_noise": False},
        site="z", rebase="none", eval=pd.DataFrame(ev), diff=pd.DataFrame(diff), fluency=pd.DataFrame(),
        null=null, p=p, replies=replies, n_split={"probe": 60, "tune": 40, "eval": N, "eval_forced_choice": N})


def test_a_collapsed_gating_run_is_inconclusive_and_names_why():
    vs = gating_verdicts(constructed(collapsed=True))
    assert [v.outcome for v in vs] == ["inconclusive", "inconclusive"]
    for v in vs:
        kinds = {c.kind for c in v.failed}
        assert {"repeated_reply", "distinct_tokens", "reply_nll"} <= kinds, v.reason
        assert "gated replies (eval)" in v.reason
    assert any("shuffled 1 map replies" in c.subject for c in vs[1].failed)


def test_a_good_gating_run_passes_its_checks():
    raise_v, null_v = gating_verdicts(constructed())
    assert not raise_v.failed and not null_v.failed, (raise_v.reason, null_v.reason)
    assert raise_v.outcome == "reproduced" and null_v.outcome == "reproduced"
    assert raise_v.claim == claims(constructed())[0] and "smollm2-135m-instruct with its own map" in raise_v.claim
    # no gain, a tight interval below MIN_GAIN: not reproduced (a verdict that can fail)
    nothing = gating_verdicts(constructed(gain=0.0, p=0.6))
    assert [v.outcome for v in nothing] == ["not reproduced", "not reproduced"], [v.reason for v in nothing]
    assert float(constructed(gain=0.0).diff.set_index("readout").loc["generated_context", "hi"]) < MIN_GAIN


def test_a_setting_outside_the_paper_range_is_flagged():
    # asked for explicitly (allow_out_of_range): computed, but the setting_range check fails
    vs = gating_verdicts(constructed(alpha=6.0, allow=True))
    assert all(v.outcome == "inconclusive" for v in vs)
    assert all(any(c.kind == "setting_range" and not c.passed for c in v.checks) for v in vs)


def test_overlapping_tune_and_eval_facts_are_flagged():
    res = constructed()
    res.facts["tune"] = res.facts["tune"] + res.facts["eval"][:5]
    v = gating_verdicts(res)[0]
    assert v.outcome == "inconclusive" and [c.kind for c in v.failed] == ["held_out"]


def test_nothing_eligible_gives_inconclusive_verdicts():
    res = constructed()
    res.mode, res.alpha = "none", float("nan")
    vs = gating_verdicts(res)
    assert all(v.outcome == "inconclusive" and v.supported is None for v in vs)
    assert "passed the degeneracy checks" in vs[0].measured


# --------------------------------------------------------------------------------------------- selection
def _tune(rows):
    return pd.DataFrame([{"mode": m, "alpha": a, "in_range": r, "allowed": r, "eligible": e,
                          "generated_context": c} for m, a, r, e, c in rows])


def test_selection_never_picks_a_degenerate_or_out_of_range_setting():
    t = _tune([("ungated", 0.0, True, True, 0.9), ("normalize", 0.1, True, True, 0.30),
               ("normalize", 0.3, True, False, 0.80),    # best rate, but its replies failed the checks
               ("normalize", 6.0, False, True, 0.95),    # out of range and not allowed
               ("contrast", 4.5, True, True, 0.30)])     # ties with normalize 0.1: the smaller alpha wins
    best = select_setting(t)
    assert (best["mode"], best["alpha"]) == ("normalize", 0.1)
    assert select_setting(t[t["eligible"] & ~t["alpha"].isin([0.1, 4.5])]) is None   # ungated is never chosen
    allowed = t.assign(allowed=t["alpha"] == 6.0)
    assert select_setting(allowed)["alpha"] == 6.0     # only when asked for
    with pytest.raises(ConfigError, match="select_by"):
        select_setting(t, by="accuracy")


def test_the_grid_stays_in_the_paper_ranges_unless_asked():
    grid = gate_grid({"normalize": [0.1, 0.2, 0.3], "contrast": [4.5, 7.5]})
    assert [(s.mode, s.alpha) for s in grid][:2] == [("normalize", 0.1), ("normalize", 0.2)]
    assert all(s.in_range for s in grid)
    with pytest.raises(ConfigError, match="outside the paper's α ranges.*normalize α=6"):
        gate_grid({"normalize": [0.1, 6.0]})
    flagged = gate_grid({"normalize": [6.0]}, allow_out_of_range=True)
    assert flagged[0].in_range is False
    for bad in ({"normalize": [0.0]}, {"raw": [1.0]}, {}):
        with pytest.raises(ConfigError):
            gate_grid(bad)


def test_the_tune_choice_says_when_it_is_within_noise():
    rng = np.random.default_rng(0)
    u = (rng.random(60) < 0.4).astype(float)
    best = pd.Series({"mode": "normalize", "alpha": 0.2, "generated_context": 0.45})
    same = tune_choice(best, {setting_key("normalize", 0.2): u}, u, by="generated_context")
    assert same.within_noise and same.diff == 0
    better = tune_choice(best, {setting_key("normalize", 0.2): np.ones(60)}, u, by="generated_context")
    assert not better.within_noise and better.lo > 0
    assert tune_choice(None, {}, u, by="generated_context").mode is None


def test_the_experiment_refuses_an_out_of_range_grid_before_loading(tmp_path):
    from interplab.experiments.registry import run_experiment

    with pytest.raises(ConfigError, match="allow_out_of_range"):
        run_experiment("truth-gating-sweep", {"target": str(tmp_path / "absent"), "data": "world-facts",
                                              "sites": "z", "normalize_alphas": "6"}, root=tmp_path)


def test_the_report_round_trips_through_a_saved_run(tmp_path):
    from interplab.probes.validity import ValidityReport

    report = ValidityReport.of(gating_verdicts(constructed(collapsed=True)))
    back = ValidityReport.load(report.save(tmp_path / "validity"))
    assert back.outcomes == report.outcomes and back.markdown() == report.markdown()
    res = constructed()
    same = FactsGating.load(res.save(tmp_path / "fg"))
    assert [v.outcome for v in gating_verdicts(same)] == [v.outcome for v in gating_verdicts(res)]
