"""The CRH implication tests without a model: Implication 3 (does diff-vector similarity predict sensitivity?
`pairwise_test`, with a permutation null) and Implication 2 (the trigonometric steerability law, `trig_law_scan`)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from interplab.core.errors import ConfigError, DataError, InputError, ShapeError
from interplab.core.result import Result
from interplab.probes.crh.cylinder import _as_2d
from interplab.probes.crh.sectors import _check_labels
from interplab.probes.stats import normal_sf, pearson


# ---------------------------------------------------------------------------------------- Implication 3 (pairwise)


@dataclass
class PairwiseTest(Result):
    """Implication-3 test: does diff-vector similarity predict sensitivity? (spec §5, fixed: permutation p-value).

    x: [n_pairs] cos(d_i, d_j); y: [n_pairs] |M_i − M_j| for within-group pairs with M_i, M_j ≠ 0.
    r: Pearson r; p_perm: two-sided permutation p-value (M shuffled over samples within group); n_perm.
    bins: DataFrame-like dict (20 x-bins: centre, mean y, SEM, count)."""

    x: np.ndarray
    y: np.ndarray
    r: float
    p_perm: float
    n_perm: int
    n_samples: int
    bins: dict
    config: dict = field(default_factory=dict)

    def to_frame(self):
        import pandas as pd

        df = pd.DataFrame({"cos": self.x, "abs_dM": self.y})
        df.attrs.update({"r": self.r, "p_perm": self.p_perm, "n_perm": self.n_perm, "n_samples": self.n_samples})
        return df

    def bins_frame(self):
        import pandas as pd

        return pd.DataFrame(self.bins)

    def subsample(self, k: int = 3000, seed: int = 0):
        """≤ k points for plotting (the scripts' 3,000)."""
        if self.x.size <= k:
            return self.x, self.y
        idx = np.random.default_rng(seed).choice(self.x.size, k, replace=False)
        return self.x[idx], self.y[idx]


def pairwise_test(diffs, margins, *, groups=None, n_perm: int = 1000, n_bins: int = 20, seed: int = 0) -> PairwiseTest:
    """Implication-3 pairwise test (spec §5 `cannot_determine`, fixed with a permutation null).

    diffs: [n, d] diff vectors of the steered samples; margins: [n] M_i (0 = never activated, dropped);
    groups: [n] concept ids (pairs are formed within a group only; default all one group).
    The permutation null shuffles M among the kept samples of each group and recomputes r over all pairs."""
    D = _as_2d(diffs, "diffs")
    M = np.asarray(margins, np.float64).ravel()
    if M.shape[0] != D.shape[0]:
        raise ShapeError(f"margins has {M.shape[0]} entries, diffs has {D.shape[0]} rows")
    g = np.zeros(D.shape[0], np.int64) if groups is None else np.unique(np.asarray(groups), return_inverse=True)[1]
    if g.shape[0] != D.shape[0]:
        raise ShapeError("groups must have one entry per diff vector")
    keep = M != 0
    Dn = D / np.linalg.norm(D, axis=1, keepdims=True)
    ii, jj = [], []
    for gid in np.unique(g[keep]):           # loop over concepts (few), not samples
        idx = np.flatnonzero(keep & (g == gid))
        a, b = np.triu_indices(idx.size, k=1)
        ii.append(idx[a])
        jj.append(idx[b])
    ii = np.concatenate(ii) if ii else np.zeros(0, np.int64)
    jj = np.concatenate(jj) if jj else np.zeros(0, np.int64)
    if ii.size < 3:
        raise DataError(f"only {ii.size} within-group pairs with M ≠ 0; the test needs at least 3")
    x = np.einsum("pd,pd->p", Dn[ii], Dn[jj])
    y = np.abs(M[ii] - M[jj])
    r = float(pearson(x, y))
    rng = np.random.default_rng(seed)
    # permute M within groups, vectorised over permutations
    perms = np.tile(np.arange(D.shape[0]), (n_perm, 1))
    for gid in np.unique(g[keep]):
        idx = np.flatnonzero(keep & (g == gid))
        perms[:, idx] = idx[rng.permuted(np.tile(np.arange(idx.size), (n_perm, 1)), axis=1)]
    Mp = M[perms]                                               # [n_perm, n]
    yp = np.abs(Mp[:, ii] - Mp[:, jj])
    rp = pearson(np.broadcast_to(x, yp.shape), yp)
    p = float((1 + np.sum(np.abs(rp) >= abs(r) - 1e-12)) / (1 + n_perm))
    edges = np.linspace(x.min(), x.max(), n_bins + 1)
    which = np.clip(np.digitize(x, edges[1:-1]), 0, n_bins - 1)
    cnt = np.bincount(which, minlength=n_bins).astype(np.float64)
    s1 = np.bincount(which, y, minlength=n_bins)
    s2 = np.bincount(which, y * y, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = s1 / cnt
        var = np.maximum(s2 / cnt - mean**2, 0) * cnt / np.maximum(cnt - 1, 1)
        sem = np.sqrt(var / cnt)
    bins = {"centre": ((edges[:-1] + edges[1:]) / 2).tolist(), "mean": mean.tolist(), "sem": sem.tolist(),
            "count": cnt.astype(int).tolist()}
    return PairwiseTest(x=x, y=y, r=r, p_perm=p, n_perm=n_perm, n_samples=int(keep.sum()), bins=bins,
                        config={"n_perm": n_perm, "n_bins": n_bins, "seed": seed})


# ---------------------------------------------------------------------------------- Implication 2 (trig law)


def steerability_slope(labels, steps=None) -> np.ndarray:
    """OLS slope of the label-2 fraction against the step index (1..K): labels [..., n, K] → [...] (the fraction is
    pooled over the n samples, as the repo's concept-level S_c). For a per-sample slope pass labels[..., None, :]."""
    lab = _check_labels(labels)
    K = lab.shape[-1]
    x = np.arange(1, K + 1, dtype=np.float64) if steps is None else np.asarray(steps, np.float64)
    frac = (lab == 2).mean(axis=-2)
    xc = x - x.mean()
    return (frac - frac.mean(-1, keepdims=True)) @ xc / (xc @ xc)


@dataclass
class TrigLawScan(Result):
    """Implication-2 scan (spec §5 `sincos_rel`, fixed per B7).

    exponents: [A] a grid; r_max: [A] max over p of Pearson r(y, x) with y = S/‖a‖^a, x = sin^a θ·cos^(2p−a) θ;
    p_best: [A] the maximising p; p_value: [A] Fisher-z two-sided p-value of r_max (uncorrected, as the repo's);
    global_r: max over (a, p); perm_p: permutation p-value of global_r (S shuffled over samples, max over the same
    grid: corrects the max-selection); n_used / n_negative_cos: samples used / handled for cos θ < 0."""

    exponents: np.ndarray
    r_max: np.ndarray
    p_best: np.ndarray
    p_value: np.ndarray
    global_r: float
    global_a: float
    global_p: float
    perm_p: float
    n_used: int
    n_negative_cos: int
    config: dict = field(default_factory=dict)

    def to_frame(self):
        import pandas as pd

        df = pd.DataFrame({"a": self.exponents, "r_max": self.r_max, "p_best": self.p_best, "p_value": self.p_value})
        df.attrs.update({"global_r": self.global_r, "perm_p": self.perm_p, "n_used": self.n_used,
                         "n_negative_cos": self.n_negative_cos})
        return df




def _group_perms(g: np.ndarray, S: np.ndarray, an: np.ndarray, n_perm: int, rng) -> np.ndarray:
    """[n_perm, n] sample indices that give every sample of a group the (S, ‖a‖) of another group,
    the groups shuffled as wholes; S and ‖a‖ must be constant within each group."""
    labels, first, inv = np.unique(g, return_index=True, return_inverse=True)
    if not (np.allclose(S, S[first][inv]) and np.allclose(an, an[first][inv])):
        raise InputError("a group permutation needs a group-level steerability and axis norm (one "
                         "value per group); pass groups=None for a sample-level S")
    return (np.stack([first[rng.permutation(labels.size)][inv] for _ in range(n_perm)])
            if n_perm else np.zeros((0, g.size), int))


def trig_law_scan(sin_theta, cos_theta, steerability, axis_norm, *, a_max: float = 10.0,
                  a_step: float = 0.05, p_step: float = 0.025, negative_cos: str = "drop",
                  n_perm: int = 100, seed: int = 0, groups=None) -> TrigLawScan:
    """For each exponent a and p ∈ [0.1, a − 0.1]: Pearson r between y = S/‖a‖^a and x =
    sin^a θ·cos^(2p−a) θ; keep the max over p. ‖a‖ is the stored diffmean norm (scalar or per
    sample), not the repo's step-length proxy. negative_cos: 'drop' (count reported) or 'abs' (use
    |cos θ|) — the repo drops them silently via NaN. groups: [n] concept labels of a concept-level S
    (and ‖a‖): the permutation null then shuffles the concepts' values among concepts, not samples
    (the samples of one concept share their S, so a sample shuffle would treat them as independent
    units); None shuffles samples."""
    sin = np.asarray(sin_theta, np.float64).ravel()
    cos = np.asarray(cos_theta, np.float64).ravel()
    S = np.asarray(steerability, np.float64).ravel()
    an = np.broadcast_to(np.asarray(axis_norm, np.float64), S.shape).astype(np.float64)
    if not (sin.shape == cos.shape == S.shape):
        raise ShapeError(f"sin, cos and steerability must have one entry per sample; got {sin.shape}, {cos.shape}, "
                         f"{S.shape}")
    if negative_cos not in ("drop", "abs"):
        raise ConfigError(f"negative_cos must be 'drop' or 'abs', got {negative_cos!r}")
    g = None if groups is None else np.asarray(groups).ravel()
    if g is not None and g.shape != S.shape:
        raise ShapeError(f"groups must have one label per sample ({S.size}); got {g.shape}")
    neg = cos < 0
    if negative_cos == "drop":
        keep = ~neg
        sin, cos, S, an = sin[keep], cos[keep], S[keep], an[keep]
        g = None if g is None else g[keep]
    else:
        cos = np.abs(cos)
    n = S.size
    if n < 4:
        raise DataError(f"trig_law_scan needs at least 4 usable samples, got {n}")
    A = np.round(np.arange(0.0, a_max + 1e-9, a_step), 10)
    ls, lc, la = np.log(np.maximum(sin, 1e-300)), np.log(np.maximum(cos, 1e-300)), np.log(an)
    rng = np.random.default_rng(seed)
    perms = _group_perms(g, S, an, n_perm, rng) if g is not None else \
        (np.stack([rng.permutation(n) for _ in range(n_perm)]) if n_perm else np.zeros((0, n), int))
    r_max = np.full(A.size, np.nan)
    p_best = np.full(A.size, np.nan)
    perm_max = np.full(max(n_perm, 0), -np.inf)
    for i, a in enumerate(A):                     # ≤ 201 exponents; the p grid and permutations are tensor ops
        P = np.round(np.arange(0.1, a - 0.1 + 1e-9, p_step), 10)
        if P.size == 0:
            continue
        X = np.exp(a * ls[None] + (2 * P[:, None] - a) * lc[None])                     # [P, n]
        y = S * np.exp(-a * la)
        Xc = X - X.mean(1, keepdims=True)
        Xn = np.sqrt((Xc**2).sum(1))
        Ys = np.vstack([y[None], y[perms]]) if n_perm else y[None]                      # [1 + n_perm, n]
        Yc = Ys - Ys.mean(1, keepdims=True)
        Yn = np.sqrt((Yc**2).sum(1))
        with np.errstate(invalid="ignore", divide="ignore"):
            R = (Xc @ Yc.T) / (Xn[:, None] * Yn[None])                                   # [P, 1 + n_perm]
        R = np.where(np.isfinite(R), R, np.nan)
        if np.all(np.isnan(R[:, 0])):
            continue
        j = int(np.nanargmax(R[:, 0]))
        r_max[i], p_best[i] = R[j, 0], P[j]
        if n_perm:
            perm_max = np.fmax(perm_max, np.nanmax(np.where(np.isnan(R[:, 1:]), -np.inf, R[:, 1:]), axis=0))
    z = np.arctanh(np.clip(r_max, -0.999999, 0.999999)) * math.sqrt(max(n - 3, 1))
    pv = np.where(np.isnan(r_max), np.nan, 2 * normal_sf(np.nan_to_num(z)))
    if np.all(np.isnan(r_max)):
        raise DataError("no (a, p) grid point gave a finite correlation (constant steerability?)")
    gi = int(np.nanargmax(r_max))
    perm_p = float((1 + np.sum(perm_max >= r_max[gi] - 1e-12)) / (1 + n_perm)) if n_perm else float("nan")
    return TrigLawScan(exponents=A, r_max=r_max, p_best=p_best, p_value=pv, global_r=float(r_max[gi]),
                       global_a=float(A[gi]), global_p=float(p_best[gi]), perm_p=perm_p, n_used=int(n),
                       n_negative_cos=int(neg.sum()),
                       config={"a_max": a_max, "a_step": a_step, "p_step": p_step,
                               "negative_cos": negative_cos, "n_perm": n_perm, "seed": seed,
                               "permuted": "sample" if g is None else "group",
                               "n_groups": None if g is None else int(np.unique(g).size),
                               "n_grid": int(sum(np.arange(0.1, a - 0.1 + 1e-9, p_step).size
                                                 for a in A))})
