"""CRH geometry without a model: cylinder fit of concept difference vectors, penalty and sector steering vectors,
sector metrics (activation rate / AUC, minimal activating strength, sector centre), the Implication-1 penalty
heatmaps and the Implication-3 pairwise test.

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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from interplab.core.errors import ConfigError, DataError, InputError, ShapeError

TWO_PI = 2.0 * math.pi


# ----------------------------------------------------------------------------------------------------------- utils
def _as_2d(x: Any, name: str) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 2:
        raise ShapeError(f"{name} must be a 2-D array [n, d]; got shape {a.shape}")
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
class Cylinder:
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

    def save(self, path) -> Path:
        from interplab.core.io import write_arrays, write_json

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        write_arrays(path / "cylinder.safetensors", {
            "axis": self.axis, "plane": self.plane, "heights": self.heights, "radii": self.radii,
            "azimuths": self.azimuths, "xy": self.xy,
        })
        write_json(path / "cylinder.json", {**self.summary(), "meta": self.meta})
        return path

    @classmethod
    def load(cls, path) -> "Cylinder":
        from interplab.core.io import read_arrays, read_json

        path = Path(path)
        if not (path / "cylinder.json").exists():
            raise DataError(f"{path} holds no cylinder.json; save one with Cylinder.save(dir)")
        a = read_arrays(path / "cylinder.safetensors")
        s = read_json(path / "cylinder.json")
        return cls(axis=a["axis"], plane=a["plane"], radius=s["radius"], heights=a["heights"], radii=a["radii"],
                   azimuths=a["azimuths"], xy=a["xy"], plane_explained=s["plane_explained"],
                   null_plane_explained=s["null_plane_explained"],
                   null_plane_explained_p99=s["null_plane_explained_p99"], cylinder_score=s["cylinder_score"],
                   axis_norm=s["axis_norm"], seed=s["seed"], meta=s.get("meta", {}))


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


# ------------------------------------------------------------------------------------------------------- vectors
def _to_np(x):
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy().astype(np.float64), True
    return np.asarray(x, dtype=np.float64), False


def penalty_vector(d_i, axis, strength, p):
    """Penalty (orthogonal-shrink) steering vector v = L·cosθ·û + L·sinθ·(1 − p)·ô (spec §4).

    d_i: [d] or [n, d] per-sample difference vectors; axis: [d] (normalised here);
    strength L and penalty p: scalars or arrays broadcastable against d_i's leading shape (use e.g.
    `strength[:, None, None]` and `p[None, :, None]` with d_i [n, d] for a full grid → [nL, np, n, d]).
    θ is the angle between d_i and û (cos may be negative), ô = unit(d_i − ⟨d_i, û⟩û) (0 when d_i ∥ û).
    p = 0 gives L·d̂_i; p = 1 gives L·cosθ·û. Returns numpy, or torch (float64→input dtype) when d_i is a tensor."""
    d, is_t = _to_np(d_i)
    u, _ = _to_np(axis)
    u = u.ravel()
    if d.shape[-1] != u.shape[0]:
        raise ShapeError(f"d_i has width {d.shape[-1]} but axis has width {u.shape[0]}")
    u = _unit(u, "axis")
    L = np.asarray(strength.detach().cpu().numpy() if hasattr(strength, "detach") else strength, np.float64)
    P = np.asarray(p.detach().cpu().numpy() if hasattr(p, "detach") else p, np.float64)
    dn = np.linalg.norm(d, axis=-1, keepdims=True)
    if np.any(dn == 0):
        raise InputError("penalty_vector: a difference vector has zero norm (θ undefined)")
    dh = d / dn
    cos = dh @ u                                           # [...]
    perp = dh - cos[..., None] * u
    sin = np.linalg.norm(perp, axis=-1)
    o = np.where(sin[..., None] > 1e-12, perp / np.maximum(sin[..., None], 1e-300), 0.0)
    v = L[..., None] * (cos[..., None] * u + (sin * (1.0 - P))[..., None] * o)
    if is_t:
        import torch

        return torch.as_tensor(v, dtype=d_i.dtype if d_i.dtype.is_floating_point else torch.float32)
    return v


def sector_angles(n_bins: int = 24) -> np.ndarray:
    """Bin-centre angles β_k = 2πk/n_bins (radians)."""
    if n_bins < 3:
        raise ConfigError(f"n_bins must be ≥ 3, got {n_bins}")
    return TWO_PI * np.arange(n_bins) / n_bins


def sector_vectors(cylinder: Cylinder, *, gamma_deg: float = 45.0, n_bins: int = 24, strengths) -> np.ndarray:
    """Sector steering vectors v(L, γ, β) = L[cos γ·û + sin γ(cos β·ê1 + sin β·ê2)] → [n_strengths, n_bins, d]."""
    L = np.asarray(strengths, np.float64).ravel()
    g = math.radians(gamma_deg)
    b = sector_angles(n_bins)
    dirs = (math.cos(g) * cylinder.axis[None]
            + math.sin(g) * (np.cos(b)[:, None] * cylinder.plane[:, 0][None]
                             + np.sin(b)[:, None] * cylinder.plane[:, 1][None]))   # [B, d]
    return L[:, None, None] * dirs[None]


def strength_grid(l_max: float, n_steps: int = 25, *, start: str = "zero") -> np.ndarray:
    """L_k = k·L_max/n_steps, k = 1..n_steps (`start="zero"`, Gemma protocol) or L_max/2 + k·L_max/(2 n_steps)
    (`start="half"`, the LLaMA scripts' upper half)."""
    k = np.arange(1, n_steps + 1, dtype=np.float64)
    if start == "zero":
        return k * l_max / n_steps
    if start == "half":
        return l_max / 2 + k * l_max / (2 * n_steps)
    raise ConfigError(f"start must be 'zero' or 'half', got {start!r}")


def penalty_grid(n: int = 20) -> np.ndarray:
    """p ∈ linspace(0, 1, n) (the scripts' grid; it contains neither 0.2 nor 0.4 at n = 20)."""
    return np.linspace(0.0, 1.0, n)


# ------------------------------------------------------------------------------------------------------- metrics
def _check_labels(labels) -> np.ndarray:
    lab = np.asarray(labels)
    if lab.size and not np.isin(lab, (1, 2, 3)).all():
        bad = np.unique(lab[~np.isin(lab, (1, 2, 3))])
        raise DataError(f"labels must be 1 (normal), 2 (concept) or 3 (gibberish); found {bad.tolist()}")
    return lab


def first_activation(labels, strengths) -> np.ndarray:
    """Minimal activating strength L*: the first strength (last axis of `labels`) with label 2; NaN if never."""
    lab = _check_labels(labels)
    L = np.asarray(strengths, np.float64)
    if lab.shape[-1] != L.shape[0]:
        raise ShapeError(f"labels' last axis ({lab.shape[-1]}) must match len(strengths) ({L.shape[0]})")
    hit = lab == 2
    idx = np.argmax(hit, axis=-1)
    out = L[idx].astype(np.float64)
    out[~hit.any(axis=-1)] = np.nan
    return out


def activation_margin(labels, strengths) -> np.ndarray:
    """Implication-3 sensitivity M = L_max − (first L with label 2), 0 when never activated (spec §5)."""
    L = np.asarray(strengths, np.float64)
    f = first_activation(labels, L)
    return np.where(np.isnan(f), 0.0, L.max() - np.nan_to_num(f))


def activation_auc(labels, strengths) -> np.ndarray:
    """Activation rate over strength (AUC of the label-2 indicator, trapezoid on the strength grid, normalised by
    the grid span; equals the plain mean for a uniform grid up to the end-point weights). Last axis = strength."""
    lab = _check_labels(labels)
    L = np.asarray(strengths, np.float64)
    y = (lab == 2).astype(np.float64)
    if L.shape[0] == 1:
        return y[..., 0]
    return np.trapezoid(y, L, axis=-1) / (L[-1] - L[0])


def sector_centre(auc, bin_angles) -> float | np.ndarray:
    """Sector centre = circular mean of bin angles weighted by max(0, AUC_β − mean AUC) (last axis = bins)."""
    a = np.asarray(auc, np.float64)
    w = np.maximum(0.0, a - a.mean(axis=-1, keepdims=True))
    return circular_mean(np.asarray(bin_angles, np.float64), w)


def suppress_centre(auc, bin_angles) -> float | np.ndarray:
    """Suppressing-sector centre: circular mean weighted by max(0, mean AUC − AUC_β)."""
    a = np.asarray(auc, np.float64)
    w = np.maximum(0.0, a.mean(axis=-1, keepdims=True) - a)
    return circular_mean(np.asarray(bin_angles, np.float64), w)


@dataclass
class SectorMap:
    """Sector-scan result (spec §2.3 step 3–4).

    labels: [n_samples, n_bins, n_strengths] ints (1 normal, 2 concept, 3 gibberish).
    strengths: [n_strengths] absolute steering norms L.
    bin_angles: [n_bins] β (radians) in the cylinder's (ê1, ê2) frame.
    gamma_deg: tilt of the steering vectors away from the axis.
    auc: [n_samples, n_bins] label-2 activation rate over strength; population_auc: [n_bins] mean over samples.
    gibberish: [n_samples, n_bins] label-3 rate over strength.
    min_strength: [n_samples, n_bins] minimal activating strength (NaN if never).
    population_min_strength: [n_bins] first L at which ≥ half the samples are activated (NaN if never).
    centre: sector centre (radians) of the population map; sample_centres: [n_samples] per-sample centres (NaN
    where a sample's map is flat); suppress: centre of the suppressing sector.
    texts: optional generated texts, flattened in (sample, bin, strength) order.
    config: the settings that produced it."""

    labels: np.ndarray
    strengths: np.ndarray
    bin_angles: np.ndarray
    gamma_deg: float
    config: dict = field(default_factory=dict)
    texts: list | None = None

    def __post_init__(self):
        self.labels = _check_labels(self.labels).astype(np.int64)
        self.strengths = np.asarray(self.strengths, np.float64)
        self.bin_angles = np.asarray(self.bin_angles, np.float64)
        if self.labels.ndim != 3 or self.labels.shape[1:] != (self.bin_angles.size, self.strengths.size):
            raise ShapeError(f"labels must be [n_samples, n_bins={self.bin_angles.size}, "
                             f"n_strengths={self.strengths.size}]; got {self.labels.shape}")

    @property
    def auc(self) -> np.ndarray:
        return activation_auc(self.labels, self.strengths)

    @property
    def population_auc(self) -> np.ndarray:
        return self.auc.mean(axis=0)

    @property
    def gibberish(self) -> np.ndarray:
        return (self.labels == 3).mean(axis=-1)

    @property
    def min_strength(self) -> np.ndarray:
        return first_activation(self.labels, self.strengths)

    @property
    def population_rate(self) -> np.ndarray:
        """[n_bins, n_strengths] fraction of samples with label 2."""
        return (self.labels == 2).mean(axis=0)

    @property
    def population_min_strength(self) -> np.ndarray:
        r = self.population_rate >= 0.5
        out = self.strengths[np.argmax(r, axis=-1)].astype(np.float64)
        out[~r.any(axis=-1)] = np.nan
        return out

    @property
    def centre(self) -> float:
        return float(sector_centre(self.population_auc, self.bin_angles))

    @property
    def suppress(self) -> float:
        return float(suppress_centre(self.population_auc, self.bin_angles))

    @property
    def sample_centres(self) -> np.ndarray:
        return np.atleast_1d(sector_centre(self.auc, self.bin_angles))

    def to_frame(self):
        """Tidy: one row per (sample, bin, strength) with the label (and text when kept)."""
        import pandas as pd

        S, B, K = self.labels.shape
        s, b, k = np.meshgrid(np.arange(S), np.arange(B), np.arange(K), indexing="ij")
        df = pd.DataFrame({
            "sample": s.ravel(), "bin": b.ravel(), "beta_deg": np.degrees(self.bin_angles)[b.ravel()],
            "strength": self.strengths[k.ravel()], "label": self.labels.ravel(),
        })
        if self.texts is not None and len(self.texts) == len(df):
            df["text"] = self.texts
        df.attrs.update({"gamma_deg": self.gamma_deg, "centre_deg": math.degrees(self.centre)})
        return df

    def bins_frame(self):
        """One row per (sample or 'population', bin): auc, gibberish rate, minimal activating strength."""
        import pandas as pd

        S, B, _ = self.labels.shape
        auc, gib, ms = self.auc, self.gibberish, self.min_strength
        rows = {"sample": np.repeat(np.arange(S), B).astype(str), "bin": np.tile(np.arange(B), S),
                "beta_deg": np.tile(np.degrees(self.bin_angles), S), "auc": auc.ravel(),
                "gibberish": gib.ravel(), "min_strength": ms.ravel()}
        df = pd.DataFrame(rows)
        pop = pd.DataFrame({"sample": ["population"] * B, "bin": np.arange(B),
                            "beta_deg": np.degrees(self.bin_angles), "auc": self.population_auc,
                            "gibberish": gib.mean(0), "min_strength": self.population_min_strength})
        return pd.concat([pop, df], ignore_index=True)

    def save(self, path) -> Path:
        from interplab.core.io import write_arrays, write_json

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        write_arrays(path / "sector_map.safetensors", {
            "labels": self.labels, "strengths": self.strengths, "bin_angles": self.bin_angles})
        write_json(path / "sector_map.json", {"gamma_deg": self.gamma_deg, "config": self.config,
                                              "centre_deg": math.degrees(self.centre)})
        if self.texts is not None:
            write_json(path / "sector_texts.json", list(self.texts))
        return path

    @classmethod
    def load(cls, path) -> "SectorMap":
        from interplab.core.io import read_arrays, read_json

        path = Path(path)
        if not (path / "sector_map.json").exists():
            raise DataError(f"{path} holds no sector_map.json; save one with SectorMap.save(dir)")
        a = read_arrays(path / "sector_map.safetensors")
        s = read_json(path / "sector_map.json")
        texts = read_json(path / "sector_texts.json") if (path / "sector_texts.json").exists() else None
        return cls(labels=a["labels"], strengths=a["strengths"], bin_angles=a["bin_angles"],
                   gamma_deg=s["gamma_deg"], config=s.get("config", {}), texts=texts)


# ------------------------------------------------------------------------------------------- Implication 1 (penalty)
@dataclass
class PenaltyMap:
    """Penalty-scan result (Implication 1).

    labels: [n_samples, n_p, n_strengths]; ps: [n_p]; strengths: [n_strengths].
    cos_theta: [n_samples] cos θ_i of each steered sample's diff vector with the axis.
    `rates(label, exclude_step1=True)` → [n_strengths, n_p] rate of `label`, dropping (sample, p) rows that already
    show that label at step 1 (the scripts' exclusion rule)."""

    labels: np.ndarray
    ps: np.ndarray
    strengths: np.ndarray
    cos_theta: np.ndarray
    config: dict = field(default_factory=dict)
    texts: list | None = None

    def __post_init__(self):
        self.labels = _check_labels(self.labels).astype(np.int64)
        self.ps = np.asarray(self.ps, np.float64)
        self.strengths = np.asarray(self.strengths, np.float64)
        self.cos_theta = np.asarray(self.cos_theta, np.float64)
        if self.labels.ndim != 3 or self.labels.shape[1:] != (self.ps.size, self.strengths.size):
            raise ShapeError(f"labels must be [n_samples, n_p={self.ps.size}, n_strengths={self.strengths.size}]; "
                             f"got {self.labels.shape}")

    def rates(self, label: int = 2, *, exclude_step1: bool = True) -> np.ndarray:
        hit = (self.labels == label).astype(np.float64)                # [S, P, K]
        keep = np.ones(hit.shape[:2], bool)
        if exclude_step1:
            keep = hit[..., 0] == 0
        w = keep[..., None].astype(np.float64)
        num = (hit * w).sum(0)
        den = w.sum(0)
        with np.errstate(invalid="ignore", divide="ignore"):
            r = np.where(den > 0, num / np.maximum(den, 1), np.nan)     # [P, K]
        return r.T

    def margins(self, p_index: int = 0) -> np.ndarray:
        """Implication-3 M_i from the p = ps[p_index] sweep."""
        return activation_margin(self.labels[:, p_index], self.strengths)

    def to_frame(self):
        import pandas as pd

        S, P, K = self.labels.shape
        s, q, k = np.meshgrid(np.arange(S), np.arange(P), np.arange(K), indexing="ij")
        df = pd.DataFrame({"sample": s.ravel(), "p": self.ps[q.ravel()], "step": k.ravel() + 1,
                           "strength": self.strengths[k.ravel()], "label": self.labels.ravel()})
        if self.texts is not None and len(self.texts) == len(df):
            df["text"] = self.texts
        return df

    def save(self, path) -> Path:
        from interplab.core.io import write_arrays, write_json

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        write_arrays(path / "penalty_map.safetensors", {"labels": self.labels, "ps": self.ps,
                                                         "strengths": self.strengths, "cos_theta": self.cos_theta})
        write_json(path / "penalty_map.json", {"config": self.config})
        if self.texts is not None:
            write_json(path / "penalty_texts.json", list(self.texts))
        return path

    @classmethod
    def load(cls, path) -> "PenaltyMap":
        from interplab.core.io import read_arrays, read_json

        path = Path(path)
        if not (path / "penalty_map.json").exists():
            raise DataError(f"{path} holds no penalty_map.json; save one with PenaltyMap.save(dir)")
        a = read_arrays(path / "penalty_map.safetensors")
        s = read_json(path / "penalty_map.json")
        texts = read_json(path / "penalty_texts.json") if (path / "penalty_texts.json").exists() else None
        return cls(labels=a["labels"], ps=a["ps"], strengths=a["strengths"], cos_theta=a["cos_theta"],
                   config=s.get("config", {}), texts=texts)


# ---------------------------------------------------------------------------------------- Implication 3 (pairwise)
@dataclass
class PairwiseTest:
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

    def save(self, path) -> Path:
        from interplab.core.io import write_arrays, write_json

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        write_arrays(path / "pairwise.safetensors", {"x": self.x, "y": self.y})
        write_json(path / "pairwise.json", {"r": self.r, "p_perm": self.p_perm, "n_perm": self.n_perm,
                                            "n_samples": self.n_samples, "bins": self.bins, "config": self.config})
        return path

    @classmethod
    def load(cls, path) -> "PairwiseTest":
        from interplab.core.io import read_arrays, read_json

        path = Path(path)
        if not (path / "pairwise.json").exists():
            raise DataError(f"{path} holds no pairwise.json; save one with PairwiseTest.save(dir)")
        a = read_arrays(path / "pairwise.safetensors")
        s = read_json(path / "pairwise.json")
        return cls(x=a["x"], y=a["y"], r=s["r"], p_perm=s["p_perm"], n_perm=s["n_perm"], n_samples=s["n_samples"],
                   bins=s["bins"], config=s.get("config", {}))


def _pearson(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson r along the last axis (x [..., m], y [..., m])."""
    xc = x - x.mean(-1, keepdims=True)
    yc = y - y.mean(-1, keepdims=True)
    den = np.sqrt((xc**2).sum(-1) * (yc**2).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (xc * yc).sum(-1) / np.where(den > 0, den, 1), np.nan)


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
    r = float(_pearson(x, y))
    rng = np.random.default_rng(seed)
    # permute M within groups, vectorised over permutations
    perms = np.tile(np.arange(D.shape[0]), (n_perm, 1))
    for gid in np.unique(g[keep]):
        idx = np.flatnonzero(keep & (g == gid))
        perms[:, idx] = idx[rng.permuted(np.tile(np.arange(idx.size), (n_perm, 1)), axis=1)]
    Mp = M[perms]                                               # [n_perm, n]
    yp = np.abs(Mp[:, ii] - Mp[:, jj])
    rp = _pearson(np.broadcast_to(x, yp.shape), yp)
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
class TrigLawScan:
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


def _norm_sf(z):
    return np.array([0.5 * math.erfc(abs(v) / math.sqrt(2)) for v in np.ravel(z)]).reshape(np.shape(z))


def trig_law_scan(sin_theta, cos_theta, steerability, axis_norm, *, a_max: float = 10.0, a_step: float = 0.05,
                  p_step: float = 0.025, negative_cos: str = "drop", n_perm: int = 100, seed: int = 0) -> TrigLawScan:
    """For each exponent a and p ∈ [0.1, a − 0.1]: Pearson r between y = S/‖a‖^a and x = sin^a θ·cos^(2p−a) θ;
    keep the max over p. ‖a‖ is the stored diffmean norm (scalar or per sample), not the repo's step-length proxy.
    negative_cos: 'drop' (count reported) or 'abs' (use |cos θ|) — the repo drops them silently via NaN."""
    sin = np.asarray(sin_theta, np.float64).ravel()
    cos = np.asarray(cos_theta, np.float64).ravel()
    S = np.asarray(steerability, np.float64).ravel()
    an = np.broadcast_to(np.asarray(axis_norm, np.float64), S.shape).astype(np.float64)
    if not (sin.shape == cos.shape == S.shape):
        raise ShapeError(f"sin, cos and steerability must have one entry per sample; got {sin.shape}, {cos.shape}, "
                         f"{S.shape}")
    if negative_cos not in ("drop", "abs"):
        raise ConfigError(f"negative_cos must be 'drop' or 'abs', got {negative_cos!r}")
    neg = cos < 0
    if negative_cos == "drop":
        keep = ~neg
        sin, cos, S, an = sin[keep], cos[keep], S[keep], an[keep]
    else:
        cos = np.abs(cos)
    n = S.size
    if n < 4:
        raise DataError(f"trig_law_scan needs at least 4 usable samples, got {n}")
    A = np.round(np.arange(0.0, a_max + 1e-9, a_step), 10)
    ls, lc, la = np.log(np.maximum(sin, 1e-300)), np.log(np.maximum(cos, 1e-300)), np.log(an)
    rng = np.random.default_rng(seed)
    perms = np.stack([rng.permutation(n) for _ in range(n_perm)]) if n_perm else np.zeros((0, n), int)
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
    pv = np.where(np.isnan(r_max), np.nan, 2 * _norm_sf(np.nan_to_num(z)))
    if np.all(np.isnan(r_max)):
        raise DataError("no (a, p) grid point gave a finite correlation (constant steerability?)")
    gi = int(np.nanargmax(r_max))
    perm_p = float((1 + np.sum(perm_max >= r_max[gi] - 1e-12)) / (1 + n_perm)) if n_perm else float("nan")
    return TrigLawScan(exponents=A, r_max=r_max, p_best=p_best, p_value=pv, global_r=float(r_max[gi]),
                       global_a=float(A[gi]), global_p=float(p_best[gi]), perm_p=perm_p, n_used=int(n),
                       n_negative_cos=int(neg.sum()),
                       config={"a_max": a_max, "a_step": a_step, "p_step": p_step, "negative_cos": negative_cos,
                               "n_perm": n_perm, "seed": seed})


__all__ = [
    "Cylinder", "fit_cylinder", "penalty_vector", "sector_vectors", "sector_angles", "strength_grid", "penalty_grid",
    "first_activation", "activation_margin", "activation_auc", "sector_centre", "suppress_centre", "SectorMap",
    "PenaltyMap", "PairwiseTest", "pairwise_test", "lrh_null_plane_explained", "procrustes_2d", "circular_mean",
    "wrap_angle", "angle_between", "max_principal_angle", "steerability_slope", "TrigLawScan", "trig_law_scan",
]
