"""The CRH cylinder without a model: the fit of concept difference vectors (axis, normal plane, radius, azimuths)
against the LRH null, and the angle helpers the other CRH modules share.

Conventions (spec methods/crh.md §2.3): for difference vectors d_i (with-concept minus without-concept),

* axis û = unit(mean_i d_i) ("diffmean");
* normal residual r_i = d_i − ⟨d_i, û⟩û, radius ρ_i = ‖r_i‖ (the full (d−1)-dim normal norm);
* plane (ê1, ê2) = top-2 principal directions of the (centred) r_i; top-2 explained variance = `plane_explained`;
* azimuth φ_i = atan2(⟨r_i, ê2⟩, ⟨r_i, ê1⟩); cylinder radius = median ρ_i;
* cylinder score = plane_explained / (top-2 EV of the LRH null: collinear d_i + isotropic noise, same n and d).

Angles are radians inside arrays; user-facing angle parameters named `*_deg` are degrees.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from interplab.core.errors import DataError, InputError, ShapeError
from interplab.core.result import Result
from interplab.core.shapes import as_2d

TWO_PI = 2.0 * math.pi


# ----------------------------------------------------------------------------------------------------------- utils
def _as_2d(x: Any, name: str) -> np.ndarray:
    a = as_2d(x, name).astype(np.float64, copy=False)
    if a.shape[0] < 1 or a.shape[1] < 2:
        raise ShapeError(f"{name} must have at least 1 row and 2 columns; got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise DataError(f"{name} contains NaN or inf values; drop or fix those rows first")
    return a


def _unit(v: np.ndarray, name: str = "vector") -> np.ndarray:
    n = float(np.linalg.norm(v))
    if not n > 0:
        raise DataError(f"{name} has zero norm; cannot normalise it")
    return v / n


def wrap_angle(a):
    """Wrap angles (radians) to (−π, π]."""
    a = np.asarray(a, dtype=np.float64)
    return np.angle(np.exp(1j * a))


def circular_mean(angles, weights=None) -> float:
    """Weighted circular mean (radians, in (−π, π]); NaN when the weights are all zero or cancel."""
    angles = np.asarray(angles, dtype=np.float64)
    w = np.ones_like(angles) if weights is None else np.asarray(weights, dtype=np.float64)
    z = np.sum(w * np.exp(1j * angles), axis=-1)
    if np.ndim(z) == 0:
        return float(np.angle(z)) if abs(z) > 1e-12 else float("nan")
    out = np.angle(z)
    out[np.abs(z) <= 1e-12] = np.nan
    return out


def angle_between(a: np.ndarray, b: np.ndarray, *, unsigned: bool = False) -> float:
    """Angle (degrees) between two vectors; `unsigned=True` treats v and −v as the same line."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    c = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    if unsigned:
        c = abs(c)
    return math.degrees(math.acos(max(-1.0, min(1.0, c))))


def max_principal_angle(A: np.ndarray, B: np.ndarray) -> float:
    """Largest principal angle (degrees) between the column spans of A [d, k] and B [d, k]."""
    qa, _ = np.linalg.qr(np.asarray(A, dtype=np.float64))
    qb, _ = np.linalg.qr(np.asarray(B, dtype=np.float64))
    s = np.linalg.svd(qa.T @ qb, compute_uv=False)
    return math.degrees(math.acos(max(-1.0, min(1.0, float(s.min())))))


def _top2_ev(r: np.ndarray) -> float:
    """Top-2 explained-variance ratio of the rows of r (centred)."""
    rc = r - r.mean(axis=0, keepdims=True)
    n, d = rc.shape
    # Gram trick when n < d: the eigenvalues of rc rcᵀ equal the nonzero ones of rcᵀ rc
    m = rc @ rc.T if n < d else rc.T @ rc
    ev = np.linalg.eigvalsh(m)[::-1]
    tot = float(ev.sum())
    if not tot > 0:
        return float("nan")
    return float(ev[:2].sum() / tot)


def lrh_null_plane_explained(n: int, d: int, *, seed: int = 0, n_rep: int = 20) -> tuple[float, float]:
    """Monte-Carlo top-2 explained variance of the LRH null (collinear d_i + isotropic noise) at sample size n in
    dimension d: the normal residuals of that null are isotropic Gaussian in the (d−1)-dim normal space, and EV is
    scale-free, so n draws of N(0, I_{d−1}) suffice. Returns (mean, 99th percentile) over `n_rep` draws."""
    rng = np.random.default_rng(seed)
    vals = np.array([_top2_ev(rng.standard_normal((n, d - 1))) for _ in range(n_rep)])
    return float(vals.mean()), float(np.quantile(vals, 0.99))


# ------------------------------------------------------------------------------------------------------- cylinder
@dataclass
class Cylinder(Result):
    """A fitted cylinder (spec §2.3). Arrays are float64 numpy.

    axis: [d] unit central axis û (diffmean direction).
    plane: [d, 2] orthonormal basis (ê1, ê2) of the top-2 principal directions of the normal residuals.
    radius: median normal norm ρ (cylinder radius).
    heights: [n] ⟨d_i, û⟩ (position along the axis).
    radii: [n] ‖r_i‖, full normal norms.
    azimuths: [n] φ_i = atan2(⟨r_i, ê2⟩, ⟨r_i, ê1⟩), radians in (−π, π].
    xy: [n, 2] in-plane coordinates (⟨r_i, ê1⟩, ⟨r_i, ê2⟩).
    plane_explained: top-2 explained-variance ratio of the r_i (the true normal space is (d−1)-dim).
    null_plane_explained: the same statistic under the LRH null at this n and d (Monte-Carlo mean).
    null_plane_explained_p99: its 99th percentile (a plane is "significant" above it).
    cylinder_score: plane_explained / null_plane_explained (≈1 for an LRH-like concept, ≫1 for a 2-D normal plane).
    axis_norm: ‖mean d_i‖ (the diffmean length ‖a‖, used to scale steering strengths).
    seed: seed of the LRH-null Monte Carlo.
    meta: free-form provenance (model, site, concept...).
    """

    axis: np.ndarray
    plane: np.ndarray
    radius: float
    heights: np.ndarray
    radii: np.ndarray
    azimuths: np.ndarray
    xy: np.ndarray
    plane_explained: float
    null_plane_explained: float
    null_plane_explained_p99: float
    cylinder_score: float
    axis_norm: float
    seed: int = 0
    meta: dict = field(default_factory=dict)

    @property
    def d(self) -> int:
        return int(self.axis.shape[0])

    @property
    def n(self) -> int:
        return int(self.heights.shape[0])

    @property
    def cos_theta(self) -> np.ndarray:
        return self.heights / np.sqrt(self.heights**2 + self.radii**2)

    def coords(self, vectors) -> dict[str, np.ndarray]:
        """Cylinder coordinates of arbitrary vectors [m, d] (or [d]): x = ⟨·, ê1⟩, y = ⟨·, ê2⟩, z = ⟨·, û⟩,
        radius = normal norm, azimuth = in-plane angle."""
        v = np.asarray(vectors.detach().cpu().numpy() if hasattr(vectors, "detach") else vectors, dtype=np.float64)
        single = v.ndim == 1
        v = np.atleast_2d(v)
        if v.shape[-1] != self.d:
            raise ShapeError(f"vectors have width {v.shape[-1]}, the cylinder lives in d={self.d}")
        z = v @ self.axis
        xy = v @ self.plane
        r = np.linalg.norm(v - z[:, None] * self.axis[None], axis=1)
        out = {"x": xy[:, 0], "y": xy[:, 1], "z": z, "radius": r, "azimuth": np.arctan2(xy[:, 1], xy[:, 0])}
        return {k: (val[0] if single else val) for k, val in out.items()}

    def summary(self) -> dict:
        return {
            "d": self.d, "n": self.n, "radius": float(self.radius), "axis_norm": float(self.axis_norm),
            "plane_explained": float(self.plane_explained), "null_plane_explained": float(self.null_plane_explained),
            "null_plane_explained_p99": float(self.null_plane_explained_p99),
            "cylinder_score": float(self.cylinder_score), "mean_cos_theta": float(np.mean(self.cos_theta)),
            "seed": int(self.seed),
        }

    def to_frame(self):
        """One row per fitted difference vector: height, radius, azimuth (rad and deg), cos θ, in-plane x/y."""
        import pandas as pd

        df = pd.DataFrame({
            "sample": np.arange(self.n), "height": self.heights, "radius": self.radii,
            "azimuth": self.azimuths, "azimuth_deg": np.degrees(self.azimuths), "cos_theta": self.cos_theta,
            "x": self.xy[:, 0], "y": self.xy[:, 1],
        })
        for k, v in self.summary().items():
            df.attrs[k] = v
        return df


def _svd_flip(vecs: np.ndarray) -> np.ndarray:
    """Deterministic sign per column: the entry with the largest |value| is positive."""
    idx = np.argmax(np.abs(vecs), axis=0)
    signs = np.sign(vecs[idx, np.arange(vecs.shape[1])])
    signs[signs == 0] = 1
    return vecs * signs


def _top2_directions(Rc: np.ndarray) -> tuple[np.ndarray, float]:
    """Top-2 principal directions [d, 2] of centred rows Rc and their explained-variance ratio. Uses eigh on the
    smaller Gram matrix (much faster than a multithreaded SVD on a busy machine; float64 keeps it accurate)."""
    n, d = Rc.shape
    if d <= n:
        w, V = np.linalg.eigh(Rc.T @ Rc)
        w, V = w[::-1], V[:, ::-1]
        top = V[:, :2]
    else:
        w, U = np.linalg.eigh(Rc @ Rc.T)
        w, U = w[::-1], U[:, ::-1]
        top = Rc.T @ U[:, :2]
        top = top / np.maximum(np.linalg.norm(top, axis=0, keepdims=True), 1e-300)
    w = np.maximum(w, 0.0)
    tot = float(w.sum())
    ev = float(w[:2].sum() / tot) if tot > 0 else float("nan")
    return _svd_flip(top.copy()), ev


def fit_cylinder(diffs, *, seed: int = 0, axis=None, n_null: int = 20, meta: dict | None = None) -> Cylinder:
    """Fit the CRH cylinder to difference vectors `diffs` [n, d] (spec §2.3).

    axis: optional fixed axis [d] (e.g. a diffmean from a different train split); default unit(mean diffs).
    seed: seed of the LRH-null Monte Carlo behind `cylinder_score` (n_null draws).
    Needs n ≥ 3 (a plane needs two residual directions plus centring)."""
    D = _as_2d(diffs, "diffs")
    n, d = D.shape
    if n < 3:
        raise InputError(f"fit_cylinder needs at least 3 difference vectors, got {n}")
    mean = D.mean(axis=0)
    axis_norm = float(np.linalg.norm(mean))
    if axis is None:
        u = _unit(mean, "the mean difference vector (the concept axis)")
    else:
        u = _unit(np.asarray(axis.detach().cpu().numpy() if hasattr(axis, "detach") else axis, np.float64).ravel(),
                  "axis")
        if u.shape[0] != d:
            raise ShapeError(f"axis has width {u.shape[0]}, diffs have width {d}")
    h = D @ u
    R = D - h[:, None] * u[None]
    Rc = R - R.mean(axis=0, keepdims=True)
    plane, ev = _top2_directions(Rc)
    # re-orthonormalise against the axis (numerical hygiene: the r_i are ⟂ û by construction)
    plane -= u[:, None] * (u @ plane)[None]
    plane, _ = np.linalg.qr(plane)
    plane = _svd_flip(plane)
    xy = R @ plane
    radii = np.linalg.norm(R, axis=1)
    az = np.arctan2(xy[:, 1], xy[:, 0])
    null_mean, null_p99 = lrh_null_plane_explained(n, d, seed=seed, n_rep=n_null)
    return Cylinder(axis=u, plane=plane, radius=float(np.median(radii)), heights=h, radii=radii, azimuths=az, xy=xy,
                    plane_explained=ev, null_plane_explained=null_mean, null_plane_explained_p99=null_p99,
                    cylinder_score=ev / null_mean, axis_norm=axis_norm, seed=seed, meta=dict(meta or {}))


def procrustes_2d(est: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Best 2×2 orthogonal map Q (rotation or reflection) with est @ Q ≈ ref, for [n, 2] point sets."""
    u, _, vt = np.linalg.svd(np.asarray(est).T @ np.asarray(ref))
    return u @ vt
