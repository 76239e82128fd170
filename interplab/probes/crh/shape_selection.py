"""Helix vs planar arc vs line: which curve a steering trajectory follows, decided on held-out points (issue 16).

`fit_helix` only shows that a helix fits better than a straight line, so a planar arc (a circle segment with no
drift along an axis) passes as a helix. Here three nested curve families are fitted to a trajectory X [K, d]
(rows in order, parameter t_j = j / (K - 1)), each linear in its coefficients given the angular frequency ω:

    line        x(t) = a + t·b
    planar arc  x(t) = a + cos(ωt)·u + sin(ωt)·v          (ω on a grid; the phase is absorbed in u, v)
    helix       x(t) = a + t·b + cos(ωt)·u + sin(ωt)·v

Each is scored by cross-validated R² over points (interleaved folds; ω re-chosen on every training fold, so the
search is inside the validation). The helix is chosen only when it beats both the arc and the line on held-out
points with a bootstrap interval (over points) of the R² gain whose lower bound is above `min_gain`; otherwise the
arc is chosen when it beats the line the same way; otherwise the line. AIC (Gaussian, shared variance) is reported
alongside.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from interplab.core.errors import InputError
from interplab.core.result import Result
from interplab.probes.stats import percentile_interval, resample_indices

SHAPES = ("line", "arc", "helix")


def _design(shape: str, t: np.ndarray, omega: float) -> np.ndarray:
    cols = [np.ones_like(t)]
    if shape in ("line", "helix"):
        cols.append(t)
    if shape in ("arc", "helix"):
        cols += [np.cos(omega * t), np.sin(omega * t)]
    return np.stack(cols, 1)


def _fit_predict(shape, t_tr, X_tr, t_te, omegas):
    """Least squares on the training points, ω chosen by training SSE; returns (prediction on t_te, ω)."""
    best = None
    for om in (omegas if shape != "line" else [0.0]):
        A = _design(shape, t_tr, om)
        coef, *_ = np.linalg.lstsq(A, X_tr, rcond=None)
        sse = float(((A @ coef - X_tr) ** 2).sum())
        if best is None or sse < best[0]:
            best = (sse, om, coef)
    _, om, coef = best
    return _design(shape, t_te, om) @ coef, om


def _aic(shape, t, X, omegas) -> float:
    pred, _ = _fit_predict(shape, t, X, t, omegas)
    n = X.size
    p = _design(shape, t, 1.0).shape[1] * X.shape[1] + (shape != "line")
    return float(n * np.log(((pred - X) ** 2).sum() / n) + 2 * p)


@dataclass
class ShapeSelection(Result):
    """Held-out comparison of line, planar arc and helix on one trajectory.

    table: one row per shape: cv_r2 (pooled over folds and dims), aic, omega (ω fitted on all points).
    gains: one row per comparison ("helix-arc", "helix-line", "arc-line"): mean held-out R² gain, bootstrap 95% CI.
    chosen: "line", "arc" or "helix". residuals: [3, K] per-point held-out squared error per shape (rows: SHAPES)."""

    table: pd.DataFrame
    gains: pd.DataFrame
    chosen: str
    residuals: np.ndarray
    settings: dict = field(default_factory=dict)

    def __post_init__(self):
        self.residuals = np.asarray(self.residuals, dtype=float)
        if self.residuals.ndim != 2 or self.residuals.shape[0] != len(SHAPES):
            raise InputError(f"residuals must be [{len(SHAPES)}, K], got {self.residuals.shape}")

    def to_frame(self) -> pd.DataFrame:
        return self.table


def select_trajectory_shape(trajectory, *, n_folds: int = 5, omegas=None, n_boot: int = 2000,
                            min_gain: float = 0.0, k_pca: int | None = 6, seed: int = 0) -> ShapeSelection:
    """Decide line vs planar arc vs helix for a trajectory [K, d] on held-out points (see the module docstring).

    omegas: angular-frequency grid (default 0.5π..6π, 45 values). k_pca: fit in the top-k PCA coordinates of the
    trajectory (None: all d dims). n_boot: bootstrap resamples of points for the gain intervals."""
    X = np.asarray(trajectory, dtype=float)
    if X.ndim != 2 or X.shape[0] < 3 * n_folds:
        raise InputError(f"need a trajectory [K, d] with K >= {3 * n_folds} points, got shape {X.shape}")
    if k_pca is not None and k_pca < X.shape[1]:
        Xc = X - X.mean(0)
        _, _, Vt = np.linalg.svd(Xc, full_matrices=False)
        X = Xc @ Vt[:k_pca].T
    K = X.shape[0]
    t = np.arange(K) / (K - 1)
    omegas = np.linspace(0.5 * np.pi, 6 * np.pi, 45) if omegas is None else np.asarray(omegas, dtype=float)
    folds = np.arange(K) % n_folds
    err = np.zeros((len(SHAPES), K))
    for f in range(n_folds):
        tr, te = folds != f, folds == f
        for s, shape in enumerate(SHAPES):
            pred, _ = _fit_predict(shape, t[tr], X[tr], t[te], omegas)
            err[s, te] = ((pred - X[te]) ** 2).sum(1)
    sst = ((X - X.mean(0)) ** 2).sum(1)                 # per-point total sum of squares
    idx = resample_indices(K, n_boot, np.random.default_rng(seed))
    r2 = lambda e, i=slice(None): 1 - e[..., i].sum(-1) / sst[i].sum()  # noqa: E731
    gains = []
    for a, b in (("helix", "arc"), ("helix", "line"), ("arc", "line")):
        ea, eb = err[SHAPES.index(a)], err[SHAPES.index(b)]
        boot = np.array([(eb[i].sum() - ea[i].sum()) / sst[i].sum() for i in idx])
        lo, hi = percentile_interval(boot)
        gains.append({"comparison": f"{a}-{b}", "gain": float(r2(ea) - r2(eb)),
                      "lo": float(lo), "hi": float(hi)})
    g = {row["comparison"]: row for row in gains}
    if g["helix-arc"]["lo"] > min_gain and g["helix-line"]["lo"] > min_gain:
        chosen = "helix"
    elif g["arc-line"]["lo"] > min_gain:
        chosen = "arc"
    else:
        chosen = "line"
    table = pd.DataFrame([{"shape": s, "cv_r2": float(r2(err[i])), "aic": _aic(s, t, X, omegas),
                           "omega": float(_fit_predict(s, t, X, t, omegas)[1])} for i, s in enumerate(SHAPES)])
    return ShapeSelection(table=table, gains=pd.DataFrame(gains), chosen=chosen, residuals=err,
                          settings={"n_folds": n_folds, "n_boot": n_boot, "min_gain": min_gain, "k_pca": k_pca,
                                    "seed": seed, "K": K})


def planted_arc(K: int = 30, *, d: int = 64, radius: float = 1.0, sweep: float = 1.5 * np.pi, noise: float = 0.01,
                seed: int = 0) -> np.ndarray:
    """A planar circular arc in R^d (no drift along any axis): the negative case a helix test must not accept."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((d, 2)))
    th = np.linspace(0, sweep, K)
    return radius * (np.cos(th)[:, None] * q[:, 0] + np.sin(th)[:, None] * q[:, 1]) + noise * rng.standard_normal((K, d))


@dataclass
class ShapeValidation(Result):
    """`validate_shapes`: one row per (planted shape, seed) in ``table`` with the chosen shape, whether it is the
    planted one, the old `fit_helix` score (mean cos-sim R²) and the held-out R² and gains of `select_trajectory_shape`;
    ``settings``: what was run."""

    table: pd.DataFrame
    settings: dict = field(default_factory=dict)

    def __post_init__(self):
        need = {"planted", "seed", "chosen", "correct", "helix_fit_mean_r2_cs"}
        if not need <= set(self.table.columns):
            raise InputError(f"ShapeValidation.table needs columns {sorted(need)}, got {list(self.table.columns)}")

    @property
    def all_correct(self) -> bool:
        return bool(self.table["correct"].all())

    @property
    def arc_passes_old_helix_fit(self) -> bool:
        """The failure this test exists for: every planted arc scores > 0.99 on the old helix fit."""
        return bool((self.table[self.table.planted == "arc"].helix_fit_mean_r2_cs > 0.99).all())

    def summary(self) -> dict:
        return {"all_correct": self.all_correct, "arc_passes_old_helix_fit": self.arc_passes_old_helix_fit}

    def to_frame(self) -> pd.DataFrame:
        return self.table


def validate_shapes(seeds=(0, 1, 2), *, K: int = 30, d: int = 64, noise: float = 0.02,
                    n_boot: int = 2000) -> ShapeValidation:
    """Planted helix, planar arc and line trajectories (one per seed), each put through `select_trajectory_shape`
    and the old `fit_helix`: the selection must name the planted shape, and the arc shows why it is needed."""
    from interplab.probes.crh.helix import fit_helix, planted_helix, planted_line

    makers = {"helix": lambda s: planted_helix(K, 1.0, d=d, noise=noise, seed=s),
              "arc": lambda s: planted_arc(K, d=d, noise=noise, seed=s),
              "line": lambda s: planted_line(K, d=d, noise=noise, seed=s)}
    rows = []
    for truth, make in makers.items():
        for s in seeds:
            X = make(s)
            sel = select_trajectory_shape(X, n_boot=n_boot, seed=s)
            g = sel.gains.set_index("comparison")
            rows.append({"planted": truth, "seed": s, "chosen": sel.chosen, "correct": sel.chosen == truth,
                         "helix_fit_mean_r2_cs": fit_helix(X).mean_r2_cs,
                         **{f"cv_r2_{r.shape}": r.cv_r2 for r in sel.table.itertuples()},
                         **{f"gain_{c}": g.loc[c, "gain"] for c in g.index},
                         **{f"gain_{c}_lo": g.loc[c, "lo"] for c in g.index}})
    return ShapeValidation(pd.DataFrame(rows), settings={"seeds": list(seeds), "K": K, "d": d, "noise": noise,
                                                         "n_boot": n_boot})
