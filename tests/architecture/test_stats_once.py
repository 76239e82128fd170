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
