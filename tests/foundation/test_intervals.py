"""The shared interval helpers (`probes.stats.intervals`, `slope_interval`) against scipy, and the PCFG l* slope
using the t quantile on its residual degrees of freedom (issue: 1.96·SE on 2 dof overstated the evidence)."""
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from interplab.probes.stats import Interval, SlopeInterval, intervals, slope_interval, t_interval


def test_slope_interval_matches_scipy_linregress():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(9)
    y = 0.7 * x + rng.standard_normal(9)
    ref = sps.linregress(x, y)
    got = slope_interval(x, y, level=0.9)
    assert isinstance(got, SlopeInterval)
    assert math.isclose(got["slope"], ref.slope, rel_tol=1e-12)
    assert math.isclose(got["se"], ref.stderr, rel_tol=1e-10)
    assert math.isclose(got["half"], sps.t.ppf(0.95, 7) * ref.stderr, rel_tol=1e-10)
    assert got["dof"] == 7 and got["lo"] < got["slope"] < got["hi"]


def test_slope_interval_with_two_dof_is_wider_than_normal():
    """The docs' pcfg-L6 l*(ℓ) points (−1, 1, 1, 4 at log2 ℓ = 0..3): slope 1.5, SE 0.387; t(2) gives ±1.67, so
    the interval [−0.17, 3.17] includes 0, where ±1.96·SE = ±0.76 did not."""
    got = slope_interval([0, 1, 2, 3], [-1, 1, 1, 4])
    assert math.isclose(got["slope"], 1.5) and math.isclose(got["se"], 0.3872983346, rel_tol=1e-9)
    assert math.isclose(got["half"], 1.6664102367, rel_tol=1e-9)
    assert got["lo"] < 0 < got["hi"]
    assert math.isnan(slope_interval([0, 1], [0, 1])["half"])  # 0 dof: no interval, not a fake one


def test_intervals_t_and_bootstrap():
    v = [0.2, 0.5, 0.4]
    t = intervals(v)
    assert isinstance(t, Interval) and t.lo == t["lo"]
    assert (t["mean"], t["lo"], t["hi"]) == t_interval(v) and t["n"] == 3 and t["method"] == "t"
    half = sps.t.ppf(0.975, 2) * np.std(v, ddof=1) / math.sqrt(3)
    assert math.isclose(t["hi"] - t["mean"], half, rel_tol=1e-12)
    b = intervals(np.r_[np.ones(30), np.zeros(70)], method="bootstrap", B=2000)
    assert b["mean"] == 0.3 and b["lo"] < 0.3 < b["hi"]
    assert intervals([1.0, float("nan")])["n"] == 1
    with pytest.raises(ValueError):
        intervals(v, method="normal")


def test_lstar_slope_reports_the_t_interval_and_the_split_view():
    from interplab.probes.pcfg import LstarSlope, LstarSplitSlopes, local_to_global, lstar_slope, lstar_slope_by_split

    rows = []
    # two probe splits: l* = −1, 0, 1, 2 (slope 1) and 0, 2, 4, 4 (slope 1.4) for ℓ = 1, 2, 4, 8
    curves = {1: ([1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1]),
              2: ([0, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1]),
              4: ([0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1]),
              8: ([0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 0.95])}
    for lo, (c0, c1) in curves.items():
        for li, layer in enumerate(range(-1, 5)):
            rows.append({"layer": layer, "target": "x", "bucket": str(lo), "span_len_lo": lo,
                         "score": (c0[li] + c1[li]) / 2, "score_split0": c0[li], "score_split1": c1[li]})
    df = pd.DataFrame(rows)
    sl = lstar_slope(local_to_global(df), "x")
    assert isinstance(sl, LstarSlope)
    assert sl["interval"] == "t(2)" and math.isclose(sl["ci95"], sl["half"]) and sl["lo"] <= sl["slope"] <= sl["hi"]
    by = lstar_slope_by_split(df, "x")
    assert isinstance(by, LstarSplitSlopes)
    assert by["slopes"] == pytest.approx([1.0, 1.4]) and by["n"] == 2 and by["method"] == "t"
    assert by["lo"] < 1.2 < by["hi"]
