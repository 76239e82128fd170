"""Issue 46 §1: typed validity checks, verdicts that turn inconclusive on a failed check, and the report a run
saves, `interplab runs show` prints and a page shows. Each check fires on a constructed bad run and stays quiet
on a good one."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from interplab.core.errors import InputError
from interplab.probes import stats
from interplab.probes import validity as V


def test_repeated_reply_fires_on_one_string_and_not_on_answers():
    collapsed = ["embrance embrance embrance"] * 137
    assert not V.repeated_reply(collapsed, subject="gated").passed
    answers = ["Paris", "Rome", "The capital is Madrid.", "Berlin", "Lisbon"]
    assert V.repeated_reply(answers, subject="ungated").passed
    c = V.repeated_reply(["a", "a", "b", "c"], subject="x", max_share=0.4)
    assert c.measured == 0.5 and not c.passed and "2 of 4" in c.detail


def test_distinct_tokens_fires_on_loops():
    assert not V.distinct_tokens(["embrance " * 12] * 3, subject="s").passed
    assert not V.distinct_tokens(["", ""], subject="s").passed         # empty replies count 0
    assert V.distinct_tokens(["The capital of France is Paris."], subject="s").passed


def test_reply_nll_against_the_unedited_replies():
    rng = np.random.default_rng(0)
    ref = rng.normal(2.0, 0.3, 200)
    same = rng.normal(2.0, 0.3, 100)
    assert V.reply_nll(same, ref, subject="s").passed
    bad = V.reply_nll(rng.normal(9.0, 0.3, 100), ref, subject="s")
    assert not bad.passed and bad.measured == 1.0
    assert not V.reply_nll([np.nan] * 10, ref, subject="s").passed   # NaN (empty reply) counts as above


def test_floor_ceiling():
    floored = V.floor_ceiling({"shared": 0.0, "k-matched": 0.02}, subject="accuracy at alpha 1")
    assert not floored.passed and "floor" in floored.detail and floored.measured == pytest.approx(0.02)
    ceiled = V.floor_ceiling({"a": 0.99, "b": 1.0}, subject="s")
    assert not ceiled.passed and "ceiling" in ceiled.detail
    assert V.floor_ceiling({"a": 0.0, "b": 0.6}, subject="s").passed   # one arm off the floor: a difference shows
    assert V.floor_ceiling({"a": 3.0, "b": 4.0}, subject="nll", ceiling=None).passed
    assert not V.floor_ceiling({"a": np.nan}, subject="s").passed


def test_match_target_and_setting_range():
    assert not V.match_target(0.4, 1.0, subject="k-matched control at L24").passed   # 40 % of the energy
    assert V.match_target(0.97, 1.0, subject="s").passed
    assert not V.setting_range(2.67, 0, 1, subject="alpha-matched", what="alpha_C").passed
    assert not V.setting_range(6, 0.1, 0.3, subject="normalize gate", what="alpha").passed
    assert V.setting_range(0.2, 0.1, 0.3, subject="normalize gate", what="alpha").passed


def test_held_out_sampling_units_multiple_testing():
    assert not V.held_out([1, 2, 3], [3, 4], subject="read position").passed
    assert V.held_out([1, 2], [3, 4], subject="s").passed
    assert V.held_out([], [3, 4], subject="s").passed
    texts = V.sampling_units(343, unit="fact", resampled="text", subject="Wilson interval of S")
    assert not texts.passed and "texts" in texts.detail
    assert V.sampling_units(343, unit="fact", resampled="fact", subject="s").passed
    assert not V.sampling_units(3, unit="seed", subject="s", minimum=5).passed
    assert not V.multiple_testing(30, None, subject="rotation null over layers").passed
    assert not V.multiple_testing(30, "none", subject="s").passed
    assert V.multiple_testing(30, "holm", subject="s").passed and V.multiple_testing(1, None, subject="s").passed


def test_reliability_ceiling():
    # a descendant that barely moved and whose map equals the base's as well as the base equals itself
    stuck = V.reliability_ceiling(0.961, 0.967, subject="lineage", drift=6e-6, min_drift=1e-3)
    assert not stuck.passed
    assert V.reliability_ceiling(0.961, 0.967, subject="lineage", drift=0.02, min_drift=1e-3).passed
    assert V.reliability_ceiling(0.80, 0.967, subject="lineage", drift=6e-6, min_drift=1e-3).passed


def test_verdict_turns_inconclusive_on_a_failed_check_and_names_it():
    good = V.floor_ceiling({"a": 0.2, "b": 0.6}, subject="s")
    bad = V.repeated_reply(["x"] * 10, subject="gated replies")
    assert V.Verdict("m", "claim", "0.1", True, (good,)).outcome == "reproduced"
    assert V.Verdict("m", "claim", "0.1", False, (good,)).outcome == "not reproduced"
    v = V.Verdict("m", "claim", "0.1", False, (good, bad))
    assert v.outcome == "inconclusive" and "repeated_reply (gated replies)" in v.reason
    assert V.Verdict("m", "claim", "0.1", None, (good,), note="interval straddles").outcome == "inconclusive"
    with pytest.raises(InputError):
        V.Check("no-such-kind", "s", True, 0, 0, "")


def test_report_round_trips_and_renders(tmp_path):
    vs = [V.Verdict("truth", "gating raises context-following", "−0.02 [−0.13, +0.08]", False,
                    (V.repeated_reply(["embrance"] * 5, subject="gated replies"),
                     V.setting_range(6, 0.1, 0.3, subject="chosen gate", what="alpha"))),
          V.Verdict("truth", "the map is stable", "r 0.967", True,
                    (V.sampling_units(343, unit="fact", subject="s"),))]
    rep = V.ValidityReport.of(vs)
    rep.save(tmp_path / "validity")
    back = V.ValidityReport.load(tmp_path / "validity")
    assert back.outcomes == {"gating raises context-following": "inconclusive", "the map is stable": "reproduced"}
    assert [v.outcome for v in back.verdict_list()] == [v.outcome for v in vs]
    assert back.verdict_list()[0].checks == vs[0].checks
    assert "INCONCLUSIVE" in back.render() and "FAILED" in back.render()
    assert back.summary()["failed_checks"] == 2
    md = back.markdown()
    assert "| gating raises context-following |" in md and "| inconclusive |" in md
    with pytest.raises(InputError):
        V.ValidityReport.of([vs[0], vs[0]])


def test_runs_show_prints_the_verdicts(tmp_path):
    from interplab.results import new_run

    with new_run("toy-check", {"x": 1}, root=tmp_path, name="r1") as run:
        run.save_result("validity", V.ValidityReport.of(
            [V.Verdict("m", "a floored comparison", "0.0 vs 0.0", False,
                       (V.floor_ceiling({"shared": 0.0, "control": 0.01}, subject="accuracy"),))]))
    out = subprocess.run([sys.executable, "-m", "interplab.cli", "runs", "show", "toy-check/r1", "--out",
                          str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "1 inconclusive" in out.stdout and "FAILED] floor_ceiling" in out.stdout
    with new_run("toy-check", {"x": 1}, root=tmp_path, name="r2") as run:
        run.save_json("summary", {"x": 1})
    out = subprocess.run([sys.executable, "-m", "interplab.cli", "runs", "show", "toy-check/r2", "--out",
                          str(tmp_path)], capture_output=True, text=True)
    assert "saved no verdicts" in out.stdout
    json.loads(json.dumps(V.ValidityReport.of([]).summary()))


def test_cluster_bootstrap_resamples_the_unit():
    rng = np.random.default_rng(0)
    facts = np.repeat(np.arange(40), 3)            # three texts per fact, perfectly correlated within a fact
    x = np.repeat(rng.random(40) > 0.5, 3).astype(float)
    est, lo, hi, k = stats.cluster_bootstrap_ci(x, facts, seed=1)
    m, lo_t, hi_t = stats.bootstrap_ci(x, seed=1)  # treats the 120 texts as independent
    assert k == 40 and est == pytest.approx(m)
    assert (hi - lo) > 1.4 * (hi_t - lo_t)          # ~sqrt(3) wider: three copies are one unit
    e2, lo2, hi2, _ = stats.cluster_bootstrap_ci(x, facts, seed=1, stat=lambda r: float(r.mean()))
    assert e2 == pytest.approx(est) and abs(lo2 - lo) < 0.05 and abs(hi2 - hi) < 0.05


def test_holm_adjust():
    p = np.array([0.01, 0.04, 0.03, np.nan])
    np.testing.assert_allclose(stats.holm_adjust(p)[:3], [0.03, 0.06, 0.06])
    assert np.isnan(stats.holm_adjust(p)[3])


def test_arm_effect_fires_on_an_inert_arm():
    inert = V.arm_effect({"α=0.01": 0.0, "α=0.5": 0.0, "α=2": 0.0}, subject="static injection")
    assert not inert.passed and inert.measured == 0.0 and "α=0.01 0%" in inert.detail
    assert not V.arm_effect({}, subject="every strength degenerate").passed
    assert not V.arm_effect({"α=2": 0.05}, subject="s").passed          # 5 % of replies: below 10 %
    assert V.arm_effect({"α=0.1": 0.02, "α=0.5": 0.6}, subject="s").passed


def test_outlier_dominance():
    bad = V.outlier_dominance(1.24, subject="raw PR, block 29", dropped="coordinate 17")
    assert not bad.passed and "coordinate 17" in bad.detail
    assert V.outlier_dominance(0.005, subject="standardised PR").passed
    assert not V.outlier_dominance(float("nan"), subject="not measured").passed
