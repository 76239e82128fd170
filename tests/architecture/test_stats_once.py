"""Issue 26 §3: every statistic is written once, in interplab/probes/stats.py. A second implementation of one of
its statistics elsewhere in the package (a Wilson interval, a normal survival function from erfc, a pandas or
scipy rank correlation) fails here, naming the file."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from interplab.probes import stats

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


# Issue 47 §4: re-implementations found by their shape, not their name (an AST walk of every module).
RESAMPLE = {"integers", "choice", "randint", "multinomial"}
QUANTILE = {"percentile", "quantile", "nanpercentile", "nanquantile"}


def _name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else (f.id if isinstance(f, ast.Name) else "")


def _calls(node):
    return [n for n in ast.walk(node) if isinstance(n, ast.Call)]


def _interval_quantiles(calls: list[ast.Call]) -> bool:
    """Two quantiles at an interval's tails: q and 1 - q of one name, or .025/.975-style literal pairs."""
    qs = [a for c in calls for a in list(c.args[1:2]) + [k.value for k in c.keywords if k.arg == "q"]]
    names = {a.id for a in qs if isinstance(a, ast.Name)}
    tails = {a.right.id for a in qs if isinstance(a, ast.BinOp) and isinstance(a.op, ast.Sub)
             and isinstance(a.left, ast.Constant) and a.left.value == 1 and isinstance(a.right, ast.Name)}
    lits = {a.value for a in qs if isinstance(a, ast.Constant)}
    return bool(names & tails) or any({lo, 1 - lo} <= lits or {100 * lo, 100 * (1 - lo)} <= lits
                                      for lo in (0.025, 0.005, 0.05))


def _resampled(fn, shared: set[str]) -> bool:
    """Resampling with replacement, or a call of a local helper named like one (e.g. `_boot_idx`)."""
    for c in _calls(fn):
        name = _name(c)
        if name in shared:
            continue
        no_replace = any(k.arg == "replace" and isinstance(k.value, ast.Constant) and k.value.value is False
                         for k in c.keywords)
        if (name in RESAMPLE and not no_replace) or "boot" in name.lower() or "resampl" in name.lower():
            return True
    return False


def _top_k_overlap(call: ast.Call) -> bool:
    """len(set(...argsort...) & set(...)): a top-k overlap written out."""
    if _name(call) != "len" or not call.args or not isinstance(call.args[0], ast.BinOp):
        return False
    return isinstance(call.args[0].op, ast.BitAnd) and any(
        _name(c) in ("argsort", "topk", "argpartition") for c in _calls(call.args[0]))


def statistics_by_hand(source: str, where: str = "<source>") -> list[str]:
    """Every place in `source` that computes one of stats.py's statistics itself."""
    from interplab.probes import stats

    shared = set(stats.__all__)
    found = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Constant) and n.value == 1.96:
            found.append(f"{where}:{n.lineno}: 1.96 (a normal interval by hand: stats.t_interval/intervals)")
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            qs = [c for c in _calls(n) if _name(c) in QUANTILE]
            if qs and _resampled(n, shared):
                found.append(f"{where}:{n.lineno}: {n.name}: quantiles of resamples (stats.bootstrap_stat)")
            elif _interval_quantiles(qs):
                found.append(f"{where}:{n.lineno}: {n.name}: a percentile interval (stats.percentile_interval)")
        elif isinstance(n, ast.Call) and _top_k_overlap(n):
            found.append(f"{where}:{n.lineno}: a top-k overlap (stats.top_k_overlap)")
    return found


def test_no_statistic_is_reimplemented_by_shape():
    offenders = []
    for p in sorted(PKG.rglob("*.py")):
        if p != PKG / "probes" / "stats.py":
            offenders += statistics_by_hand(p.read_text(), str(p.relative_to(PKG.parent)))
    assert not offenders, "statistics re-implemented outside probes/stats.py:\n" + "\n".join(offenders)


@pytest.mark.parametrize("source, what", [
    (("def f(x, rng):\n    b = x[rng.integers(0, len(x), (99, len(x)))].mean(1)\n"
     "    return np.quantile(b, 0.5)"), "quantiles of resamples"),
    ("def f(self, x):\n    b = x[self._boot_idx(len(x))].mean(1)\n    return np.nanquantile(b, 0.5, 0)",
     "quantiles of resamples"),
    ("def f(v, q):\n    return np.quantile(v, q), np.quantile(v, 1 - q)", "a percentile interval"),
    ("def f(m, s, n):\n    return m - 1.96 * s / n ** 0.5", "1.96"),
    ("ov = len(set(np.argsort(-a)[:k]) & set(np.argsort(-b)[:k])) / k", "a top-k overlap"),
])
def test_the_shape_guard_finds_a_reimplementation(source, what):
    found = statistics_by_hand(source)
    assert len(found) == 1 and what in found[0], found


def test_the_shape_guard_leaves_plain_uses_alone():
    ok = ("def f(x, rng, null):\n    perm = rng.permutation(len(x))\n"
          "    return np.quantile(null, 0.95), stats.bootstrap_ci(x), len(set(a) & set(b))")
    assert statistics_by_hand(ok) == []


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


def _passing(op: str, thr: float) -> float:
    return {">=": thr, ">": thr + 1.0, "<=": thr, "<": thr - 1.0}[op]


@pytest.mark.parametrize("module", ["truth", "decodeshare", "crh"])
def test_the_three_validations_share_the_recovery_table(module):
    """Each validation's recovery table applies `stats.target_row` (and so its NaN policy) to every target: two
    seeds meet every bar, then one seed of the first target turns NaN; every row must equal target_row's."""
    import importlib

    mod = importlib.import_module(f"interplab.probes.{module}.validation")
    cls = next(v for k, v in vars(mod).items() if k.endswith("Validation") and isinstance(v, type)
               and v.__module__ == mod.__name__)
    per_seed = pd.DataFrame([{"seed": s, "condition": "planted",
                              **{m: _passing(op, thr) for m, op, thr in mod.TARGETS}} for s in (0, 1)])
    first = mod.TARGETS[0][0]
    for frame in (per_seed, per_seed.assign(**{first: [np.nan, per_seed[first][1]]})):
        val = object.__new__(cls)       # only per_seed is read by recovery_table
        val.per_seed = frame
        table = val.recovery_table().set_index("metric")
        for metric, op, thr in mod.TARGETS:
            want = stats.target_row(frame[metric], op, thr)
            got = table.loc[metric]
            assert {k: got[k] for k in ("n_seeds", "n_nan", "pass")} == \
                {k: want[k] for k in ("n_seeds", "n_nan", "pass")}, (module, metric)
        assert bool(table.loc[first, "pass"]) == (frame is per_seed), module
