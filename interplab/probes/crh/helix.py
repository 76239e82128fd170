"""Helix ("spiral probe") fit of a norm-constrained steering trajectory (spec methods/crh.md §2.4, B6).

Input: optimised steering vectors X [K, d] stacked in order of their norm budget w. Both modes centre X and take
its top-k PCA coordinates Z [K, k], then regress helix targets Y_j = (t_j, r_j cos 2πn t_j, r_j sin 2πn t_j),
t_j = linspace(0, 1, K), r_j = r + r_var·t_j, on Z.

* **fixed** (default, interplab): targets centred and an intercept fitted; quality = per-coordinate R²
  (scale-free, so r itself is not identifiable — only r_var/r, scanned on a small grid); the turn rate n is found by
  a fine 1-D scan maximising mean R²(cos, sin) over [n_min, n_max], then refined by golden-section search.
* **faithful** (the repo's `train_probe`): no intercept, raw targets, minimum-MSE grid point over
  n_rot ∈ {0.6..1.2}, r ∈ {0.1..1.0}, r_var ∈ {0..0.5} (step 0.1). Known pathology: MSE floor ≈ 1/12 (the t column's
  mean² 0.25 over 3 columns cannot be fitted by zero-mean Z) and r pinned at the grid minimum 0.1.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from interplab.core.errors import ConfigError, DataError, InputError, ShapeError
from interplab.core.nan import finite_argmax
from interplab.core.result import Result

HELIX_MODES = ("fixed", "faithful")


def _pca(X: np.ndarray, k: int):
    mean = X.mean(0)
    Xc = X - mean
    K, d = Xc.shape
    w, U = np.linalg.eigh(Xc @ Xc.T)                   # K×K Gram: K is small (tens of vectors)
    w, U = np.maximum(w[::-1], 0.0), U[:, ::-1]
    k = min(k, K - 1, d, int(np.sum(w > 1e-12 * max(float(w[0]), 1e-300))))   # drop null directions
    comps = Xc.T @ U[:, :k]
    comps = comps / np.maximum(np.linalg.norm(comps, axis=0, keepdims=True), 1e-300)   # [d, k]
    Z = Xc @ comps
    ev = w[:k] / max(float(w.sum()), 1e-300)
    return mean, comps.T, Z, ev


def helix_targets(K: int, n_rot: float, r: float = 1.0, r_var: float = 0.0) -> np.ndarray:
    """Y [K, 3] = (t, r_t cos 2πn t, r_t sin 2πn t) with t = linspace(0, 1, K), r_t = r + r_var·t."""
    t = np.linspace(0.0, 1.0, K)
    rt = r + r_var * t
    return np.stack([t, rt * np.cos(2 * math.pi * n_rot * t), rt * np.sin(2 * math.pi * n_rot * t)], axis=1)


def _fit_fixed(Z: np.ndarray, Y: np.ndarray):
    """Least squares with intercept; returns (coef [3, k], intercept [3], R² [3], mse)."""
    A = np.concatenate([Z, np.ones((Z.shape[0], 1))], axis=1)
    B, *_ = np.linalg.lstsq(A, Y, rcond=None)
    res = Y - A @ B
    ss_res = (res**2).sum(0)
    ss_tot = ((Y - Y.mean(0)) ** 2).sum(0)
    r2 = np.where(ss_tot > 0, 1.0 - ss_res / np.where(ss_tot > 0, ss_tot, 1.0), np.nan)
    return B[:-1].T, B[-1], r2, float((res**2).mean())


def _fit_faithful(Z: np.ndarray, Y: np.ndarray):
    B, *_ = np.linalg.lstsq(Z, Y, rcond=None)
    res = Y - Z @ B
    ss_res = (res**2).sum(0)
    ss_tot = ((Y - Y.mean(0)) ** 2).sum(0)
    r2 = np.where(ss_tot > 0, 1.0 - ss_res / np.where(ss_tot > 0, ss_tot, 1.0), np.nan)
    return B.T, np.zeros(Y.shape[1]), r2, float((res**2).mean())


@dataclass
class HelixConfig:
    """Helix-fit settings.

    mode: 'fixed' (centred targets + intercept, R², 1-D scan of n) or 'faithful' (repo grid, no intercept, MSE).
    k: PCA components kept (repo: 5; capped at K−1).
    n_min, n_max: turn-rate range (repo grid 0.6..1.2).
    n_step: scan step (fixed: 0.005 then golden-section refinement; faithful: the repo's 0.1).
    r_var_ratios: fixed mode only, grid of r_var/r (radius growth); r itself is not identifiable under R².
    r_grid, r_var_grid: faithful mode grids (repo: 0.1..1.0 and 0..0.5, step 0.1)."""

    mode: str = "fixed"
    k: int = 5
    n_min: float = 0.6
    n_max: float = 1.2
    n_step: float = 0.005
    r_var_ratios: tuple = (0.0,)
    r_grid: tuple = tuple(np.round(np.arange(1, 11) * 0.1, 10))
    r_var_grid: tuple = tuple(np.round(np.arange(0, 6) * 0.1, 10))

    def __post_init__(self):
        if self.mode not in HELIX_MODES:
            raise ConfigError(f"mode must be one of {HELIX_MODES}, got {self.mode!r}")
        if not self.n_max > self.n_min > 0 or self.n_step <= 0:
            raise ConfigError("need 0 < n_min < n_max and n_step > 0")
        if self.k < 3:
            raise ConfigError(f"k must be ≥ 3 to carry a 3-D helix, got {self.k}")


@dataclass
class HelixFit(Result):
    """Helix-fit result.

    mode, n_rot (turns over the trajectory), r, r_var (faithful: fitted grid values; fixed: r = 1, r_var = ratio),
    r2 [3] per-coordinate R² of (t, cos, sin), mean_r2_cs = mean R²(cos, sin), mse (mean squared residual),
    coef [3, k] and intercept [3] of Z·coefᵀ + intercept ≈ Y, pca_mean [d], components [k, d], Z [K, k],
    explained [k] PCA explained-variance ratios, scan_n / scan_score: the objective along n (fixed: mean R²(cos,sin);
    faithful: min MSE over r, r_var at that n)."""

    mode: str
    n_rot: float
    r: float
    r_var: float
    r2: np.ndarray
    mean_r2_cs: float
    mse: float
    coef: np.ndarray
    intercept: np.ndarray
    pca_mean: np.ndarray
    components: np.ndarray
    Z: np.ndarray
    explained: np.ndarray
    scan_n: np.ndarray
    scan_score: np.ndarray
    config: dict = field(default_factory=dict)

    @property
    def K(self) -> int:
        return int(self.Z.shape[0])

    def targets(self) -> np.ndarray:
        return helix_targets(self.K, self.n_rot, self.r, self.r_var)

    def reconstruct(self, idx=None) -> np.ndarray:
        """The ideal helix point(s) mapped back to d dims: x = Wᵀ·P⁺·(Y_idx − b) (+ the PCA mean in fixed mode;
        the repo omits the mean, B6). idx: int, list or None (all K) → [d] or [m, d]."""
        Y = self.targets()
        single = isinstance(idx, (int, np.integer))
        sel = Y[[idx]] if single else (Y if idx is None else Y[np.asarray(idx)])
        Zt = (sel - self.intercept) @ np.linalg.pinv(self.coef).T          # [m, k]
        X = Zt @ self.components
        if self.mode == "fixed":
            X = X + self.pca_mean
        return X[0] if single else X

    def summary(self) -> dict:
        return {"mode": self.mode, "n_rot": self.n_rot, "r": self.r, "r_var": self.r_var,
                "r2_t": float(self.r2[0]), "r2_cos": float(self.r2[1]), "r2_sin": float(self.r2[2]),
                "mean_r2_cs": self.mean_r2_cs, "mse": self.mse, "K": self.K}

    def to_frame(self):
        import pandas as pd

        Y = self.targets()
        pred = self.Z @ self.coef.T + self.intercept
        t = np.linspace(0, 1, self.K)
        df = pd.DataFrame({"index": np.arange(self.K), "t": t, "y_t": Y[:, 0], "y_cos": Y[:, 1], "y_sin": Y[:, 2],
                           "pred_t": pred[:, 0], "pred_cos": pred[:, 1], "pred_sin": pred[:, 2]})
        for j in range(min(3, self.Z.shape[1])):
            df[f"pc{j + 1}"] = self.Z[:, j]
        df.attrs.update(self.summary())
        return df

@dataclass
class HelixFits(Result, Mapping):
    """Helix fits of one trajectory by mode: a read-only mapping over the modes that were fitted
    (`fits["fixed"]`, `set(fits)`, `fits.items()`), in `HELIX_MODES` order."""

    fixed: HelixFit | None = None
    faithful: HelixFit | None = None

    def __getitem__(self, mode: str) -> HelixFit:
        fit = getattr(self, mode, None) if mode in HELIX_MODES else None
        if fit is None:
            raise KeyError(mode)
        return fit

    def __iter__(self):
        return (m for m in HELIX_MODES if getattr(self, m) is not None)

    def __len__(self) -> int:
        return sum(getattr(self, m) is not None for m in HELIX_MODES)


def fit_helix(trajectory, config: HelixConfig | None = None, **overrides) -> HelixFit:
    """Fit a helix to a steering trajectory [K, d] (rows in order of norm budget). See the module docstring."""
    from dataclasses import replace

    cfg = config or HelixConfig()
    if overrides:
        cfg = replace(cfg, **overrides)
    X = np.asarray(trajectory.detach().cpu().numpy() if hasattr(trajectory, "detach") else trajectory, np.float64)
    if X.ndim != 2:
        raise ShapeError(f"trajectory must be [K, d]; got {X.shape}")
    if X.shape[0] < 6:
        raise InputError(f"a helix fit needs at least 6 trajectory points, got {X.shape[0]}")
    if not np.all(np.isfinite(X)):
        raise DataError("trajectory contains NaN/inf")
    mean, comps, Z, ev = _pca(X, cfg.k)
    fit = _fit_faithful_grid if cfg.mode == "faithful" else _fit_fixed_scan
    return fit(Z, cfg, pca_mean=mean, components=comps, explained=ev)


def _fit_faithful_grid(Z: np.ndarray, cfg: HelixConfig, **pca) -> HelixFit:
    """The repo's grid: minimum MSE over (n, r, r_var), no intercept."""
    from dataclasses import asdict

    K = Z.shape[0]
    ns = np.round(np.arange(cfg.n_min, cfg.n_max + 1e-9, 0.1), 10)
    best = None
    scan = []
    for n in ns:                      # tiny grid (7 × 10 × 6): a loop is clearer than a tensor here
        best_n = math.inf
        for r in cfg.r_grid:
            for rv in cfg.r_var_grid:
                coef, b, r2, mse = _fit_faithful(Z, helix_targets(K, n, r, rv))
                best_n = min(best_n, mse)
                if best is None or mse < best[0] - 1e-15:
                    best = (mse, n, r, rv, coef, b, r2)
        scan.append(best_n)
    mse, n, r, rv, coef, b, r2 = best
    return HelixFit(mode="faithful", n_rot=float(n), r=float(r), r_var=float(rv), r2=r2,
                    mean_r2_cs=float(np.mean(r2[1:])), mse=mse, coef=coef, intercept=b, Z=Z, scan_n=ns,
                    scan_score=np.asarray(scan), config=asdict(cfg), **pca)


def _fit_fixed_scan(Z: np.ndarray, cfg: HelixConfig, **pca) -> HelixFit:
    """Maximise mean R²(cos, sin) over n (grid scan, then golden-section refinement) and the r_var/r grid."""
    from dataclasses import asdict

    K = Z.shape[0]

    def objective(n: float, q: float) -> float:
        _, _, r2, _ = _fit_fixed(Z, helix_targets(K, n, 1.0, q))
        return float(np.mean(r2[1:]))

    ns = np.arange(cfg.n_min, cfg.n_max + 1e-9, cfg.n_step)
    grid = np.array([[objective(n, q) for n in ns] for q in cfg.r_var_ratios])     # [Q, N]
    best = finite_argmax(grid)
    if best is None:
        raise DataError("the helix fit gave no finite R² on the (n, q) grid; the concept points may be constant or "
                        "too few (need at least 3 distinct concepts)")
    qi, ni = np.unravel_index(best, grid.shape)
    q = float(cfg.r_var_ratios[qi])
    # golden-section refinement inside the bracketing grid cell
    lo, hi = ns[max(ni - 1, 0)], ns[min(ni + 1, ns.size - 1)]
    g = (math.sqrt(5) - 1) / 2
    a, b_ = lo, hi
    c, d = b_ - g * (b_ - a), a + g * (b_ - a)
    fc, fd = objective(c, q), objective(d, q)
    for _ in range(30):
        if fc > fd:
            b_, d, fd = d, c, fc
            c = b_ - g * (b_ - a)
            fc = objective(c, q)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b_ - a)
            fd = objective(d, q)
    n_best = (a + b_) / 2
    if objective(n_best, q) < grid[qi, ni]:
        n_best = float(ns[ni])
    coef, b, r2, mse = _fit_fixed(Z, helix_targets(K, n_best, 1.0, q))
    return HelixFit(mode="fixed", n_rot=float(n_best), r=1.0, r_var=q, r2=r2, mean_r2_cs=float(np.mean(r2[1:])),
                    mse=mse, coef=coef, intercept=b, Z=Z, scan_n=ns, scan_score=grid[qi], config=asdict(cfg),
                    **pca)


def planted_helix(K: int = 30, n_rot: float = 1.0, *, d: int = 64, r: float = 1.0, r_var: float = 0.0,
                  pitch: float = 1.0, noise: float = 0.01, offset: float = 0.0, seed: int = 0) -> np.ndarray:
    """A helix trajectory in R^d: x_j = W·(pitch·t_j, r_j cos 2πn t_j, r_j sin 2πn t_j) + offset·c + noise."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((d, 4)))
    Y = helix_targets(K, n_rot, r, r_var) * np.array([pitch, 1.0, 1.0])
    return Y @ q[:, :3].T + offset * q[:, 3] + noise * rng.standard_normal((K, d))


def planted_line(K: int = 30, *, d: int = 64, dist: float = 3.0, noise: float = 0.01, seed: int = 0) -> np.ndarray:
    """The LRH reference trajectory: collinear w·dist·Δ̂ (w = linspace(0.1, 3, K)) + noise."""
    rng = np.random.default_rng(seed)
    u = rng.standard_normal(d)
    u /= np.linalg.norm(u)
    w = np.linspace(0.1, 3.0, K)
    return (w * dist)[:, None] * u[None] + noise * rng.standard_normal((K, d))
