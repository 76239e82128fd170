"""Issue 26 §3: every statistic is written once, in interplab/probes/stats.py. A second implementation of one of
its statistics elsewhere in the package (a Wilson interval, a normal survival function from erfc, a pandas or
scipy rank correlation) fails here, naming the file."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

PKG = Path(__file__).resolve().parents[2] / "interplab"
PATTERNS = {
    "Wilson interval": re.compile(r"z \* z / \(?\s*(2 \* )?n"),
    "normal survival function": re.compile(r"\berfc\(|norm\.sf\("),
    "rank correlation": re.compile(r"method=[\"']spearman[\"']|spearmanr\(|kendalltau\(|pearsonr\("),
}


def test_statistics_live_in_stats_only():
    offenders = []
    for p in PKG.rglob("*.py"):
        if p == PKG / "probes" / "stats.py":
            continue
        text = p.read_text()
        offenders += [f"{p.relative_to(PKG.parent)}: {what}" for what, rx in PATTERNS.items() if rx.search(text)]
    assert not offenders, "statistics re-implemented outside probes/stats.py: " + "; ".join(offenders)


def test_the_moved_statistics_keep_their_values():
    from interplab.probes import stats
    from interplab.probes.truth import binomial_ci

    assert binomial_ci is stats.wilson_interval
    lo, hi = stats.wilson_interval(0.5, 100)
    assert round(lo, 4) == 0.4038 and round(hi, 4) == 0.5962   # the textbook Wilson interval for 50/100
    assert np.all(np.isnan(stats.wilson_interval(0.3, 0)))
    np.testing.assert_allclose(2 * stats.normal_sf(np.array([1.959963984540054, 0.0])), [0.05, 1.0], rtol=1e-12)


def test_one_nan_policy_for_every_recovery_table():
    from interplab.probes import stats

    r = stats.target_row([0.9, np.nan, 0.95], ">=", 0.8)
    assert isinstance(r, stats.TargetRow)
    assert (r["n_seeds"], r["n_nan"], r["pass"]) == (3, 1, False)          # a NaN seed fails its target
    assert r["min"] == 0.9 and r["max"] == 0.95 and r["mean"] == 0.925      # the finite seeds are summarised
    assert stats.target_row([0.9, 0.95], ">=", 0.8)["pass"] and not stats.target_row([0.9, 0.7], ">=", 0.8)["pass"]
    none = stats.target_row([np.nan, np.nan], "<", 1.0)
    assert np.isnan(none["mean"]) and np.isnan(none["min"]) and not none["pass"]
    assert stats.target_row([0.1], "<", 0.2)["target"] == "< 0.2"
    inf = stats.target_row([np.inf], ">=", 3)             # a control that removes nothing: the ratio is inf, a pass
    assert inf["pass"] and inf["mean"] == inf["min"] == np.inf and inf["n_nan"] == 0


def test_the_three_validations_share_the_recovery_table():
    import inspect

    from interplab.probes.crh.validation import CrhValidation
    from interplab.probes.decodeshare.validation import DecodeShareValidation
    from interplab.probes.truth.validation import TruthValidation

    for cls in (TruthValidation, DecodeShareValidation, CrhValidation):
        assert "stats.target_row" in inspect.getsource(cls.recovery_table), cls.__name__
