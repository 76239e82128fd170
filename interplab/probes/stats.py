"""Statistics shared by every method: correlations, rank statistics, bootstrap and t intervals, permutation and
sign-flip tests. One implementation each, vectorised along the last axis where that is the natural use.

Nothing here needs scipy except `t_interval` (scipy is a declared dependency for it)."""
from __future__ import annotations

import numpy as np

from interplab.core.errors import ShapeError
from interplab.core.record import Record

__all__ = ["pearson", "rankdata", "spearman", "bootstrap_ci", "cluster_bootstrap_ci", "t_interval", "intervals",
           "slope_interval", "holm_adjust",
           "paired_signflip_test", "permutation_p", "spearman_interval", "wilson_interval", "normal_sf", "target_row", "bh_qvalues",
           "Interval", "SlopeInterval", "SpearmanInterval", "TargetRow", "resample_indices",
           "percentile_interval", "bootstrap_stat", "top_k_overlap"]


def pearson(a, b) -> np.ndarray:
    """Pearson r along the last axis (a, b broadcast to [..., n]); NaN where either side is constant."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    a = a - a.mean(-1, keepdims=True)
    b = b - b.mean(-1, keepdims=True)
    den = np.sqrt((a * a).sum(-1) * (b * b).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (a * b).sum(-1) / np.where(den > 0, den, 1.0), np.nan)


def rankdata(x) -> np.ndarray:
    """Average ranks (1-based) along the last axis, ties averaged (scipy.stats.rankdata's 'average')."""
    x = np.asarray(x, dtype=np.float64)
    flat = x.reshape(-1, x.shape[-1])
    order = np.argsort(flat, axis=-1, kind="mergesort")
    srt = np.take_along_axis(flat, order, -1)
    out = np.empty_like(flat)
    n = flat.shape[-1]
    for i in range(flat.shape[0]):  # one pass per row; the tie averaging inside is vectorised
        starts = np.flatnonzero(np.r_[True, srt[i, 1:] != srt[i, :-1]])
        sizes = np.diff(np.r_[starts, n])
        avg = starts + (sizes - 1) / 2.0 + 1
        out[i, order[i]] = np.repeat(avg, sizes)
    return out.reshape(x.shape)


def spearman(a, b) -> float:
    """Spearman ρ of two equally sized arrays (flattened; maps compare cell by cell): Pearson of average ranks,
    as scipy.stats.spearmanr. NaN for fewer than 2 points or a constant side."""
    a = np.asarray(getattr(a, "scores", a), dtype=np.float64).ravel()
    b = np.asarray(getattr(b, "scores", b), dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ShapeError(f"spearman needs equally sized inputs, got {a.size} and {b.size} values")
    if a.size < 2:
        return float("nan")
    return float(pearson(rankdata(a), rankdata(b)))


def bootstrap_ci(values, *, B: int = 5000, level: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """(mean, lo, hi): percentile bootstrap CI of the mean of `values` (B resamples, vectorised)."""
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.size == 0:
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(B, x.size))
    means = x[idx].mean(axis=1)
    a = (1 - level) / 2
    return float(x.mean()), float(np.quantile(means, a)), float(np.quantile(means, 1 - a))


def cluster_bootstrap_ci(values, clusters, *, B: int = 5000, level: float = 0.95, seed: int = 0,
                         stat=None) -> tuple[float, float, float, int]:
    """(estimate, lo, hi, n_clusters): percentile bootstrap that resamples whole clusters (the sampling unit: the
    fact behind several texts, the concept behind several prompts), not rows.

    values: [n] or [n, ...] rows; clusters: [n] labels. stat(rows) -> float (default: the mean over rows of the
    resample, so clusters weigh by their size as in the pooled mean). Vectorised for the default mean."""
    x = np.asarray(values, dtype=np.float64)
    g = np.asarray(clusters).reshape(-1)
    if x.shape[0] != g.size:
        raise ShapeError(f"cluster_bootstrap_ci: {x.shape[0]} values but {g.size} cluster labels")
    labels, inv = np.unique(g, return_inverse=True)
    k = labels.size
    if k == 0:
        return float("nan"), float("nan"), float("nan"), 0
    rng = np.random.default_rng(seed)
    draw = rng.integers(0, k, size=(B, k))
    a = (1 - level) / 2
    if stat is None:
        flat = x.reshape(x.shape[0], -1).mean(1)
        sums = np.bincount(inv, weights=flat, minlength=k)
        sizes = np.bincount(inv, minlength=k).astype(np.float64)
        boots = sums[draw].sum(1) / sizes[draw].sum(1)
        est = float(flat.mean())
    else:
        members = [np.flatnonzero(inv == c) for c in range(k)]
        boots = np.array([stat(x[np.concatenate([members[c] for c in row])]) for row in draw])
        est = float(stat(x))
    boots = boots[np.isfinite(boots)]
    if boots.size == 0:
        return est, float("nan"), float("nan"), int(k)
    return est, float(np.quantile(boots, a)), float(np.quantile(boots, 1 - a)), int(k)


def holm_adjust(p) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values (family-wise, any dependence) of a p-value array (any shape); NaNs stay
    NaN and do not count as tests."""
    flat = np.asarray(p, dtype=float).ravel()
    out = np.full(flat.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(flat))
    m = ok.size
    if m:
        order = ok[np.argsort(flat[ok], kind="stable")]
        adj = np.maximum.accumulate(flat[order] * (m - np.arange(m)))
        out[order] = np.minimum(adj, 1.0)
    return out.reshape(np.shape(p))


def t_interval(values, *, level: float = 0.95) -> tuple[float, float, float]:
    """(mean, lo, hi): Student-t interval of the mean (n − 1 degrees of freedom). Use it for a handful of seeds,
    where 1.96·SE is far too narrow. NaN bounds for fewer than 2 values."""
    from scipy.stats import t as student_t

    x = np.asarray(values, dtype=np.float64).reshape(-1)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return float("nan"), float("nan"), float("nan")
    m = float(x.mean())
    if x.size < 2:
        return m, float("nan"), float("nan")
    half = float(student_t.ppf(0.5 + level / 2, x.size - 1)) * float(x.std(ddof=1)) / np.sqrt(x.size)
    return m, float(m - half), float(m + half)


class Interval(Record):
    """`intervals`: mean, lo, hi (the interval of the mean), n (finite values), method ('t' | 'bootstrap'),
    level."""

    KEYS = ("mean", "lo", "hi", "n", "method", "level")


def intervals(values, *, method: str = "t", level: float = 0.95, B: int = 5000, seed: int = 0) -> Interval:
    """The one interval every method reports: {mean, lo, hi, n, method, level} of the mean of `values` (NaNs
    dropped), by a Student-t interval (`t`, n − 1 dof: seeds) or a percentile bootstrap (`bootstrap`: many
    examples). A JSON-ready dict, so experiments save it as is."""
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    x = x[np.isfinite(x)]
    if method == "t":
        m, lo, hi = t_interval(x, level=level)
    elif method == "bootstrap":
        m, lo, hi = bootstrap_ci(x, B=B, level=level, seed=seed)
    else:
        raise ValueError(f"method must be 't' or 'bootstrap', got {method!r}")
    return Interval(mean=m, lo=lo, hi=hi, n=int(x.size), method=method, level=level)


class SlopeInterval(Record):
    """`slope_interval`: slope, intercept, lo, hi (slope ± half), half (t quantile x se), se, dof (n − 2), n."""

    KEYS = ("slope", "intercept", "lo", "hi", "half", "se", "dof", "n")


def slope_interval(x, y, *, level: float = 0.95) -> SlopeInterval:
    """Least-squares slope of y on x with its Student-t interval (n − 2 residual dof; with 4 points the t quantile
    is 4.30, not 1.96). {slope, intercept, lo, hi, half, se, dof, n}; NaN bounds for fewer than 3 points."""
    from scipy.stats import t as student_t

    x = np.asarray(x, dtype=np.float64).reshape(-1)
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    if x.shape != y.shape:
        raise ShapeError(f"slope_interval needs equally long x and y, got {x.size} and {y.size}")
    n = int(x.size)
    nan = float("nan")
    if n < 2 or np.ptp(x) == 0:
        return SlopeInterval(slope=nan, intercept=nan, lo=nan, hi=nan, half=nan, se=nan, dof=max(0, n - 2), n=n)
    xc = x - x.mean()
    slope = float((xc * (y - y.mean())).sum() / (xc * xc).sum())
    intercept = float(y.mean() - slope * x.mean())
    dof = n - 2
    if dof < 1:
        se = half = nan
    else:
        resid = y - (intercept + slope * x)
        se = float(np.sqrt((resid @ resid) / dof / (xc * xc).sum()))
        half = float(student_t.ppf(0.5 + level / 2, dof)) * se
    return SlopeInterval(slope=slope, intercept=intercept, lo=slope - half, hi=slope + half, half=half, se=se, dof=dof,
                         n=n)


def paired_signflip_test(a, b, *, B: int = 10000, seed: int = 0) -> float:
    """Two-sided paired sign-flip test of mean(a − b) = 0; p = (c + 1) / (B + 1)."""
    diff = np.asarray(a, dtype=np.float64).reshape(-1) - np.asarray(b, dtype=np.float64).reshape(-1)
    if diff.size == 0:
        return float("nan")
    rng = np.random.default_rng(seed)
    obs = abs(diff.mean())
    signs = rng.choice(np.array([-1.0, 1.0]), size=(B, diff.size))
    null = np.abs((signs * diff).mean(axis=1))
    return float((np.sum(null >= obs - 1e-15) + 1) / (B + 1))


def permutation_p(observed: float, null, *, alternative: str = "greater") -> float:
    """p = (1 + #{null ≥ observed}) / (1 + B) ('greater'), with ≤ for 'less' and |·| for 'two-sided'."""
    null = np.asarray(null, dtype=np.float64).reshape(-1)
    null = null[np.isfinite(null)]
    if not np.isfinite(observed) or null.size == 0:
        return float("nan")
    if alternative == "greater":
        c = np.sum(null >= observed - 1e-12)
    elif alternative == "less":
        c = np.sum(null <= observed + 1e-12)
    elif alternative == "two-sided":
        c = np.sum(np.abs(null) >= abs(observed) - 1e-12)
    else:
        raise ValueError(f"alternative must be 'greater', 'less' or 'two-sided', got {alternative!r}")
    return float((c + 1) / (null.size + 1))


class SpearmanInterval(Record):
    """`spearman_interval`: rho, lo, hi (percentile bootstrap), p (two-sided permutation), n (cells)."""

    KEYS = ("rho", "lo", "hi", "p", "n")


def spearman_interval(a, b, *, B: int = 2000, n_perm: int = 2000, level: float = 0.95, seed: int = 0
                      ) -> SpearmanInterval:
    """Spearman ρ of two maps compared cell by cell, with a percentile bootstrap interval (cells resampled in pairs,
    B resamples; resamples with a constant side are dropped) and a two-sided permutation p (one side's cells
    shuffled, n_perm times). {rho, lo, hi, p, n}; NaN where ρ is undefined (fewer than 3 cells or a constant map).
    The cells of one map are not independent draws (heads of one model), so read the interval as the spread of ρ
    over which cells happen to be compared, not as a sampling interval over models."""
    x = np.asarray(getattr(a, "scores", a), dtype=np.float64).ravel()
    y = np.asarray(getattr(b, "scores", b), dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ShapeError(f"spearman_interval needs equally sized inputs, got {x.size} and {y.size} values")
    nan = float("nan")
    rho = spearman(x, y) if x.size >= 3 else nan
    if not np.isfinite(rho):
        return SpearmanInterval(rho=nan, lo=nan, hi=nan, p=nan, n=int(x.size))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(B, x.size))
    boot = pearson(rankdata(x[idx]), rankdata(y[idx]))
    boot = boot[np.isfinite(boot)]
    lo, hi = (np.quantile(boot, [(1 - level) / 2, (1 + level) / 2]) if boot.size else (nan, nan))
    ry = rankdata(y)
    perm = np.argsort(rng.random((n_perm, x.size)), axis=1)
    null = pearson(rankdata(x)[None], ry[perm])
    return SpearmanInterval(rho=rho, lo=float(lo), hi=float(hi), p=permutation_p(rho, null, alternative="two-sided"),
                            n=int(x.size))


def wilson_interval(p: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval (lo, hi) for a proportion p observed on n trials; (nan, nan) for n = 0."""
    if n == 0:
        return float("nan"), float("nan")
    den = 1 + z * z / n
    c = (p + z * z / (2 * n)) / den
    h = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return float(c - h), float(c + h)


def normal_sf(z) -> np.ndarray:
    """One-sided standard-normal survival P(Z > |z|), elementwise, from math.erfc (no scipy): the two-sided p of a
    z statistic is 2 * normal_sf(z)."""
    import math

    return np.array([0.5 * math.erfc(abs(v) / math.sqrt(2)) for v in np.ravel(z)]).reshape(np.shape(z))


_OPS = {">=": np.greater_equal, ">": np.greater, "<=": np.less_equal, "<": np.less}


class TargetRow(Record):
    """`target_row`: target ("op threshold"), mean, t95_lo, t95_hi, min, max, n_seeds, n_nan, pass."""

    KEYS = ("target", "mean", "t95_lo", "t95_hi", "min", "max", "n_seeds", "n_nan", "pass")


def target_row(values, op: str, threshold: float, *, level: float = 0.95) -> TargetRow:
    """One row of a validation's recovery table: how per-seed `values` meet the target `op threshold`.

    The one NaN policy of every recovery table: a NaN seed fails its target and is counted in n_nan. ±inf is a value
    (DecodeShare's ratio is inf when a control removes nothing) and compares as one: min and max are over the non-NaN
    seeds; the mean and its Student-t interval over the finite ones, or the common infinite value when every
    non-NaN seed is the same infinity (NaN otherwise). pass: no seed is NaN and every seed meets the target."""
    if op not in _OPS:
        raise ValueError(f"target op must be one of {sorted(_OPS)}, got {op!r}")
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    ok = ~np.isnan(v)
    m, lo, hi = t_interval(v, level=level)
    if not np.isfinite(v).any() and ok.any() and np.unique(v[ok]).size == 1:
        m = lo = hi = float(v[ok][0])
    with np.errstate(invalid="ignore"):
        meets = _OPS[op](v, threshold)
    return TargetRow({"target": f"{op} {threshold:g}", "mean": m, "t95_lo": lo, "t95_hi": hi,
                      "min": float(v[ok].min()) if ok.any() else float("nan"),
                      "max": float(v[ok].max()) if ok.any() else float("nan"),
                      "n_seeds": int(v.size), "n_nan": int((~ok).sum()),
                      "pass": bool(v.size and ok.all() and meets.all())})


def bh_qvalues(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg q-values of a p-value array (any shape)."""
    flat = np.asarray(p, dtype=float).ravel()
    m = flat.size
    order = np.argsort(flat, kind="stable")
    q = flat[order] * m / np.arange(1, m + 1)
    q = np.minimum.accumulate(q[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(q, 1.0)
    return out.reshape(np.shape(p))


def t_test_p(values, *, mu: float = 0.0, alternative: str = "greater") -> float:
    """One-sample Student-t test of mean(values) against `mu` (n − 1 dof; NaNs dropped): the p-value
    for 'greater' (mean > mu), 'less' or 'two-sided'. The test behind `t_interval`, for a handful of
    seeds whose p-values a family correction (`holm_adjust`) needs. NaN for fewer than 2 values;
    with zero spread, 0 or 1 by the side the mean is on (a deterministic effect), 1 at mu itself."""
    from scipy.stats import t as student_t

    x = np.asarray(values, dtype=np.float64).reshape(-1)
    x = x[np.isfinite(x)]
    if alternative not in ("greater", "less", "two-sided"):
        raise ValueError(f"alternative must be 'greater', 'less' or 'two-sided', "
                         f"got {alternative!r}")
    if x.size < 2:
        return float("nan")
    diff = float(x.mean()) - float(mu)
    sd = float(x.std(ddof=1))
    if sd == 0.0:
        if diff == 0.0:
            return 1.0
        hit = {"greater": diff > 0, "less": diff < 0, "two-sided": True}[alternative]
        return 0.0 if hit else 1.0
    t = diff / (sd / np.sqrt(x.size))
    dof = x.size - 1
    if alternative == "greater":
        return float(student_t.sf(t, dof))
    if alternative == "less":
        return float(student_t.cdf(t, dof))
    return float(min(1.0, 2 * student_t.sf(abs(t), dof)))


# -------------------------------------------------- correlations over units that are not i.i.d.
# Issue 46 §2 (the atlas): two per-layer profiles that both trend with depth correlate whatever
# they measure, and an i.i.d. permutation of 30 autocorrelated layers gives a null far too
# narrow. The tools below partial the depth out of a rank correlation and build the null from
# surrogates that keep the layer structure.
def residualize(x, covariates) -> np.ndarray:
    """Residuals of x [..., n] after least squares on an intercept and `covariates` ([n] or
    [n, k]; one-hot columns for a categorical covariate such as the layer of a head)."""
    x = np.asarray(x, dtype=np.float64)
    z = np.asarray(covariates, dtype=np.float64)
    z = z.reshape(z.shape[0], -1)
    if z.shape[0] != x.shape[-1]:
        raise ShapeError(f"residualize: {x.shape[-1]} values but {z.shape[0]} covariate rows")
    design = np.column_stack([np.ones(z.shape[0]), z])
    proj = design @ np.linalg.pinv(design)      # hat matrix (pinv: one-hot + intercept collinear)
    return x - x @ proj.T


def partial_spearman(a, b, covariates) -> float:
    """Spearman ρ of a and b with `covariates` partialled out: Pearson r of the residuals of
    rank(a) and rank(b) after least squares on an intercept and the covariates (`residualize`).
    With the layer index as covariate, a shared trend with depth no longer counts as agreement.
    NaN when a residual is constant."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ShapeError(f"partial_spearman needs equally sized inputs, got {a.size} and {b.size}")
    ra, rb = residualize(rankdata(a), covariates), residualize(rankdata(b), covariates)
    return float(pearson(ra, rb))


def phase_surrogates(x, B: int, *, seed: int = 0) -> np.ndarray:
    """[B, n] Fourier phase-randomised surrogates of a series x [n] (Theiler et al. 1992): the
    same mean and periodogram, so the same circular autocorrelation at every lag, with uniformly
    random phases. A smooth series gives smooth surrogates, which an i.i.d. shuffle does not."""
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    n = x.size
    spec = np.fft.rfft(x)
    rng = np.random.default_rng(seed)
    phase = rng.uniform(0.0, 2 * np.pi, size=(B, spec.size))
    phase[:, 0] = 0.0                                       # the mean stays
    if n % 2 == 0:                                          # a real series' Nyquist term is real
        phase[:, -1] = np.where(rng.random(B) < 0.5, 0.0, np.pi)
    return np.fft.irfft(np.abs(spec)[None] * np.exp(1j * phase), n=n, axis=-1)


def group_permutations(groups, B: int, *, seed: int = 0) -> np.ndarray:
    """[B, n] index arrays, each permuting the positions within every group (labels [n]) at
    random: a null that keeps what a group shares (the heads of a layer keep the layer's level)."""
    g = np.asarray(groups).reshape(-1)
    rng = np.random.default_rng(seed)
    out = np.tile(np.arange(g.size), (B, 1))
    for label in np.unique(g):                              # one vectorised shuffle per group
        idx = np.flatnonzero(g == label)
        out[:, idx] = idx[np.argsort(rng.random((B, idx.size)), axis=1)]
    return out


def effective_n(a, b, *, max_lag: int | None = None) -> float:
    """Effective number of independent points behind the correlation of two series of n points
    (Pyper & Peterman 1998): 1/n* = 1/n + (2/n) Σ_{j=1..max_lag} r_a(j) r_b(j), r the sample
    autocorrelations, max_lag n/5 by default; clipped to [2, n]. Two smooth profiles over 30
    layers are worth far fewer than 30 points."""
    a = np.asarray(a, dtype=np.float64).reshape(-1)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    if a.shape != b.shape:
        raise ShapeError(f"effective_n needs equally long series, got {a.size} and {b.size}")
    n = a.size
    if n < 3:
        return float(n)
    lag = max(1, n // 5) if max_lag is None else max(1, min(int(max_lag), n - 1))

    def acf(x):
        x = x - x.mean()
        den = float(x @ x)
        return np.array([float(x[:-j] @ x[j:]) / den if den > 0 else 0.0
                         for j in range(1, lag + 1)])
    inv = 1 / n + 2 / n * float((acf(a) * acf(b)).sum())
    return float(np.clip(1 / inv if inv > 0 else n, 2, n))


class PartialSpearmanTest(Record):
    """`partial_spearman_test`: rho (plain Spearman), rho_partial (covariates partialled out),
    p (two-sided, against the structure-keeping null), p_iid (the same statistic against an
    i.i.d. shuffle, for contrast), null_sd / iid_sd (the two nulls' spread), n (points), n_eff
    (effective independent points: `effective_n` of the residual profiles for a series; the
    residual degrees of freedom n − groups for grouped units), null ("phase" | "groups")."""

    KEYS = ("rho", "rho_partial", "p", "p_iid", "null_sd", "iid_sd", "n", "n_eff", "null")


def partial_spearman_test(a, b, covariates, *, null: str, groups=None, B: int = 2000,
                          seed: int = 0) -> PartialSpearmanTest:
    """The partial Spearman ρ of a and b (covariates partialled out) against a null that keeps
    the structure of the units.

    null="phase": a and b are series (per-layer profiles); b's residual profile is replaced by
    phase-randomised surrogates (the same autocorrelation), re-residualised. null="groups": b's
    ranks are permuted within `groups` (heads within their layer), so a level a group shares
    cannot make agreement. The i.i.d. shuffle of b is computed beside it (p_iid, iid_sd) only to
    show how much too narrow it is. NaN where ρ is undefined (a constant residual)."""
    if null not in ("phase", "groups"):
        raise ValueError(f"null must be 'phase' or 'groups', got {null!r}")
    x = np.asarray(a, dtype=np.float64).ravel()
    y = np.asarray(b, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ShapeError(f"partial_spearman_test needs equally sized inputs, got {x.size} and "
                         f"{y.size} values")
    if null == "groups" and (groups is None or np.asarray(groups).size != x.size):
        raise ShapeError("null='groups' needs one group label per value")
    nan, n = float("nan"), int(x.size)
    rho = spearman(x, y) if n >= 3 else nan
    ra, rb = residualize(rankdata(x), covariates), residualize(rankdata(y), covariates)
    obs = float(pearson(ra, rb)) if n >= 3 else nan
    if not np.isfinite(obs):
        return PartialSpearmanTest(rho=rho, rho_partial=nan, p=nan, p_iid=nan, null_sd=nan,
                                   iid_sd=nan, n=n, n_eff=nan, null=null)
    if null == "phase":
        surr = residualize(phase_surrogates(rb, B, seed=seed), covariates)
        n_eff = effective_n(ra, rb)
    else:
        surr = residualize(rankdata(y)[group_permutations(groups, B, seed=seed)], covariates)
        n_eff = float(n - np.unique(np.asarray(groups)).size)
    shuffled = np.argsort(np.random.default_rng([seed, 1]).random((B, n)), axis=1)
    iid = residualize(rankdata(y)[shuffled], covariates)
    d_struct, d_iid = pearson(ra[None], surr), pearson(ra[None], iid)
    return PartialSpearmanTest(rho=rho, rho_partial=obs,
                               p=permutation_p(obs, d_struct, alternative="two-sided"),
                               p_iid=permutation_p(obs, d_iid, alternative="two-sided"),
                               null_sd=float(np.nanstd(d_struct)), iid_sd=float(np.nanstd(d_iid)),
                               n=n, n_eff=float(n_eff), null=null)


__all__ += ["residualize", "partial_spearman", "phase_surrogates", "group_permutations",
            "effective_n", "partial_spearman_test", "PartialSpearmanTest"]


def resample_indices(n: int, B: int, rng: np.random.Generator) -> np.ndarray:
    """[B, n] row indices drawn with replacement: the resamples of a bootstrap over n units."""
    return rng.integers(0, n, size=(B, n))


def percentile_interval(samples, *, level: float = 0.95, axis: int = 0,
                        skip_nan: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi): the central `level` range of `samples` along `axis` (bootstrap resamples, random splits)."""
    a = (1 - level) / 2
    q = np.nanquantile if skip_nan else np.quantile
    x = np.asarray(samples, dtype=np.float64)
    return q(x, a, axis=axis), q(x, 1 - a, axis=axis)


def bootstrap_stat(values, stat, *, B: int = 5000, level: float = 0.95,
                   rng: np.random.Generator | None = None, seed: int = 0) -> tuple[float, float, float]:
    """(stat(values), lo, hi): percentile bootstrap interval of any statistic of the units in `values` (axis 0).

    `stat` maps an array of units to a number and must accept a leading resample axis (e.g.
    `lambda v: v.mean(-1)`); the interval is over `B` resamples of the units."""
    x = np.asarray(values, dtype=np.float64)
    if x.shape[0] == 0:
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(seed) if rng is None else rng
    boot = stat(x[resample_indices(x.shape[0], B, rng)])
    lo, hi = percentile_interval(boot, level=level)
    return float(stat(x)), float(lo), float(hi)


def top_k_overlap(a, b, k: int) -> float:
    """The fraction of the k largest entries of `a` that are among the k largest of `b` (ties broken by
    position, stably, so the answer does not depend on the sort algorithm)."""
    a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    if k < 1 or k > a.size or a.size != b.size:
        raise ShapeError(f"top_k_overlap: k={k} must lie in 1..{a.size} and both maps must have "
                         f"{a.size} entries (got {b.size})")
    top = lambda v: set(np.argsort(-v, kind="stable")[:k].tolist())  # noqa: E731
    return len(top(a) & top(b)) / k


def sem_halfwidth(values, *, axis: int = -1, z: float = 1.96) -> np.ndarray:
    """z times the standard error of the mean along `axis` (0 where there is a single unit): the half-width of
    the normal-approximation interval a figure draws as error bars."""
    x = np.asarray(values, dtype=np.float64)
    n = x.shape[axis]
    if n < 2:
        return np.zeros(np.delete(np.array(x.shape), axis % x.ndim))
    return z * x.std(axis=axis, ddof=1) / np.sqrt(n)


__all__ += ["sem_halfwidth"]
