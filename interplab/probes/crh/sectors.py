"""Sector and penalty steering without a model: penalty and sector steering vectors, the strength and penalty grids,
per-sample metrics (activation rate / AUC, minimal activating strength, sector centre) and the two scan results,
`SectorMap` (spec methods/crh.md §2.3 steps 3-4) and `PenaltyMap` (Implication 1)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from interplab.core.errors import ConfigError, DataError, InputError, ShapeError
from interplab.core.result import Result
from interplab.probes.crh.cylinder import TWO_PI, Cylinder, _unit, circular_mean


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


def sector_vector(cylinder: Cylinder, *, gamma_deg: float, beta_deg: float, strength: float) -> np.ndarray:
    """One sector steering vector L[cos γ·û + sin γ(cos β·ê1 + sin β·ê2)] [d] at any β (degrees)."""
    b, g = math.radians(beta_deg), math.radians(gamma_deg)
    return strength * (math.cos(g) * cylinder.axis
                       + math.sin(g) * (math.cos(b) * cylinder.plane[:, 0] + math.sin(b) * cylinder.plane[:, 1]))


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
class SectorMap(Result):
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


# ------------------------------------------------------------------------------------------- Implication 1 (penalty)


@dataclass
class PenaltyMap(Result):
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
