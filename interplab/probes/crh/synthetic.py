"""Planted-cylinder generator and steering oracle (spec methods/crh.md §7A), seeded and model-free.

d_i = α_i·u + ρ_i(cos φ_i·e1 + sin φ_i·e2) + ε_i with α ~ N(3, 0.5²), ρ ~ |N(1.5, 0.3²)|, φ ~ U[0, 2π),
ε ~ N(0, 0.05²·I). Each *test* sample i has a hidden sector centre ψ_i (`shared`: ψ0; `tied`: φ_i + δ;
`independent`: U[0, 2π)). The oracle for a steering vector v on test sample i is
s_i(v) = ⟨v, u⟩ + κ‖Pv‖·g(β(v) − ψ_i) − τ_i with g = +1 within w of ψ_i, −1 within w of ψ_i + π, else 0, and
the judge: label 3 if ‖v‖ > C or ‖(I − uuᵀ − P)v‖ > c, else 2 if s_i ≥ 0, else 1 (stochastic: P(2) = σ(s/T)).
The LRH null sets ρ_i = 0 and g ≡ 0."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from interplab.core.errors import ConfigError, ShapeError
from interplab.probes.crh.cylinder import fit_cylinder
from interplab.probes.crh.sectors import (PenaltyMap, SectorMap, penalty_grid, penalty_vector, sector_angles,
                                          sector_vectors)

SECTOR_MODES = ("shared", "tied", "independent")


@dataclass
class PlantedCylinderConfig:
    """Settings of the planted-cylinder generator (defaults = the spec's calibrated ones).

    d: ambient dimension D.
    n_train: number of training difference vectors (used to fit the cylinder).
    n_test: number of test samples (the steered ones, each with its own hidden sector centre).
    alpha_mean, alpha_std: axial height α_i ~ N(alpha_mean, alpha_std²).
    rho_mean, rho_std: normal radius ρ_i ~ |N(rho_mean, rho_std²)|.
    noise: isotropic noise std σ of ε_i.
    sector: 'shared' | 'tied' | 'independent' (how ψ_i is drawn).
    psi0_deg: shared sector centre (degrees); None draws it uniformly.
    tie_offset_deg: δ for 'tied' (ψ_i = φ_i + δ); 180 makes the own normal direction suppressing.
    half_width_deg: w, half-width of the facilitating / suppressing wedges.
    kappa: κ, gain of the in-plane component.
    tau_mean, tau_std: activation threshold τ_i ~ N(tau_mean, tau_std²).
    max_norm: C, label 3 above this steering norm (inf = never).
    max_off: c, label 3 when the off-cylinder part (outside span(u, e1, e2)) exceeds this (inf = never).
    temperature: 0 = deterministic oracle; > 0 samples label 2 with probability σ(s/T).
    lrh_null: ρ_i = 0 and g ≡ 0 (the linear-representation null).
    with_acts: also draw h⁻_i ~ N(0, I) and h⁺_i = h⁻_i + d_i (for mean-centre / probe baselines).
    seed: RNG seed (everything is a function of it)."""

    d: int = 64
    n_train: int = 200
    n_test: int = 5
    alpha_mean: float = 3.0
    alpha_std: float = 0.5
    rho_mean: float = 1.5
    rho_std: float = 0.3
    noise: float = 0.05
    sector: str = "shared"
    psi0_deg: float | None = None
    tie_offset_deg: float = 0.0
    half_width_deg: float = 45.0
    kappa: float = 1.5
    tau_mean: float = 2.5
    tau_std: float = 0.3
    max_norm: float = math.inf
    max_off: float = math.inf
    temperature: float = 0.0
    lrh_null: bool = False
    with_acts: bool = False
    seed: int = 0

    def __post_init__(self):
        if self.sector not in SECTOR_MODES:
            raise ConfigError(f"sector must be one of {SECTOR_MODES}, got {self.sector!r}")
        if self.d < 4:
            raise ConfigError(f"d must be ≥ 4 (axis + plane + off-cylinder), got {self.d}")
        if self.n_train < 3 or self.n_test < 1:
            raise ConfigError("need n_train ≥ 3 and n_test ≥ 1")


@dataclass
class PlantedCylinder:
    """A drawn planted cylinder: frame (u, e1, e2), train/test difference vectors and hidden test-sample sectors.
    Angles in radians."""

    config: PlantedCylinderConfig
    u: np.ndarray
    e1: np.ndarray
    e2: np.ndarray
    train: np.ndarray
    test: np.ndarray
    phi_train: np.ndarray
    phi_test: np.ndarray
    rho_train: np.ndarray
    rho_test: np.ndarray
    psi: np.ndarray
    tau: np.ndarray
    psi0: float
    acts_minus: np.ndarray | None = None
    acts_plus: np.ndarray | None = None
    _rng: np.random.Generator | None = field(default=None, repr=False)

    @property
    def plane(self) -> np.ndarray:
        return np.stack([self.e1, self.e2], axis=1)

    @property
    def expected_radius(self) -> float:
        """√(ρ0² + (D−1)σ²): the median normal norm the fit should find (≈1.55 at the defaults)."""
        c = self.config
        rho0 = 0.0 if c.lrh_null else c.rho_mean
        return math.sqrt(rho0**2 + (c.d - 1) * c.noise**2)

    def planted_angle(self, vectors) -> np.ndarray:
        """β(v): angle of the plane projection of v in the planted (e1, e2) frame."""
        v = np.asarray(vectors, np.float64)
        return np.arctan2(v @ self.e2, v @ self.e1)

    def to_planted_angle(self, fitted_angle, plane: np.ndarray) -> np.ndarray:
        """Map an angle in a fitted frame (plane [d, 2]) to the planted frame via its direction vector."""
        a = np.asarray(fitted_angle, np.float64)
        vec = np.cos(a)[..., None] * plane[:, 0] + np.sin(a)[..., None] * plane[:, 1]
        return self.planted_angle(vec)

    def score(self, vectors) -> np.ndarray:
        """s_i(v) for vectors [..., n_test, d] (sample axis second to last; broadcasting allowed)."""
        c = self.config
        v = np.asarray(vectors, np.float64)
        if v.shape[-1] != c.d:
            raise ShapeError(f"vectors must end in d={c.d}, got {v.shape}")
        if v.ndim < 2 or v.shape[-2] not in (1, c.n_test):
            raise ShapeError(f"vectors must be [..., n_test={c.n_test}, d] (or [..., 1, d]); got {v.shape}")
        along = v @ self.u
        x, y = v @ self.e1, v @ self.e2
        pn = np.hypot(x, y)
        if c.lrh_null:
            g = np.zeros_like(pn)
        else:
            w = math.radians(c.half_width_deg)
            delta = np.angle(np.exp(1j * (np.arctan2(y, x) - self.psi)))
            opp = np.angle(np.exp(1j * (delta - math.pi)))
            g = np.where(np.abs(delta) < w, 1.0, np.where(np.abs(opp) < w, -1.0, 0.0))
        return along + c.kappa * pn * g - self.tau

    def judge(self, vectors, rng: np.random.Generator | None = None) -> np.ndarray:
        """Oracle labels {1, 2, 3} for vectors [..., n_test, d]."""
        c = self.config
        v = np.asarray(vectors, np.float64)
        s = self.score(v)
        if c.temperature > 0:
            rng = rng or self._rng or np.random.default_rng(c.seed + 1)
            act = rng.random(s.shape) < 1.0 / (1.0 + np.exp(-s / c.temperature))
        else:
            act = s >= 0
        lab = np.where(act, 2, 1)
        if math.isfinite(c.max_norm) or math.isfinite(c.max_off):
            along = v @ self.u
            off = v - along[..., None] * self.u - (v @ self.e1)[..., None] * self.e1 - (v @ self.e2)[..., None] * self.e2
            bad = (np.linalg.norm(v, axis=-1) > c.max_norm) | (np.linalg.norm(off, axis=-1) > c.max_off)
            lab = np.where(bad, 3, lab)
        return lab.astype(np.int64)


def planted_cylinder(config: PlantedCylinderConfig | None = None, **overrides) -> PlantedCylinder:
    """Draw a planted cylinder (spec §7A). `overrides` are PlantedCylinderConfig fields."""
    c = config or PlantedCylinderConfig()
    if overrides:
        from dataclasses import replace

        c = replace(c, **overrides)
    rng = np.random.default_rng(c.seed)
    q, _ = np.linalg.qr(rng.standard_normal((c.d, 3)))
    u, e1, e2 = q[:, 0], q[:, 1], q[:, 2]
    n = c.n_train + c.n_test
    alpha = rng.normal(c.alpha_mean, c.alpha_std, n)
    rho = np.zeros(n) if c.lrh_null else np.abs(rng.normal(c.rho_mean, c.rho_std, n))
    phi = rng.uniform(0, 2 * math.pi, n)
    eps = rng.normal(0.0, c.noise, (n, c.d))
    D = alpha[:, None] * u + rho[:, None] * (np.cos(phi)[:, None] * e1 + np.sin(phi)[:, None] * e2) + eps
    psi0 = math.radians(c.psi0_deg) if c.psi0_deg is not None else float(rng.uniform(0, 2 * math.pi))
    phi_test = phi[c.n_train:]
    if c.sector == "shared":
        psi = np.full(c.n_test, psi0)
    elif c.sector == "tied":
        psi = phi_test + math.radians(c.tie_offset_deg)
    else:
        psi = rng.uniform(0, 2 * math.pi, c.n_test)
    tau = rng.normal(c.tau_mean, c.tau_std, c.n_test)
    acts_m = acts_p = None
    if c.with_acts:
        acts_m = rng.standard_normal((n, c.d))
        acts_p = acts_m + D
    return PlantedCylinder(config=c, u=u, e1=e1, e2=e2, train=D[: c.n_train], test=D[c.n_train:],
                           phi_train=phi[: c.n_train], phi_test=phi_test, rho_train=rho[: c.n_train],
                           rho_test=rho[c.n_train:], psi=psi, tau=tau, psi0=psi0, acts_minus=acts_m,
                           acts_plus=acts_p, _rng=np.random.default_rng(c.seed + 7919))


def synthetic_sector_map(organism: PlantedCylinder, cylinder=None, *, gamma_deg: float = 45.0, n_bins: int = 24,
                         strengths=None):
    """Sector scan against the oracle: fit the cylinder on `organism.train` (unless given), steer every test sample
    with v(L, γ, β) for all bins and strengths, label with the oracle. Returns (SectorMap, Cylinder)."""
    cyl = cylinder if cylinder is not None else fit_cylinder(organism.train, seed=organism.config.seed)
    L = np.linspace(6.0 / 25, 6.0, 25) if strengths is None else np.asarray(strengths, np.float64)
    V = sector_vectors(cyl, gamma_deg=gamma_deg, n_bins=n_bins, strengths=L)          # [K, B, d]
    lab = organism.judge(V[:, :, None, :])                                             # [K, B, S]
    labels = np.transpose(lab, (2, 1, 0))                                              # [S, B, K]
    return SectorMap(labels=labels, strengths=L, bin_angles=sector_angles(n_bins), gamma_deg=gamma_deg,
                     config={"source": "planted-cylinder oracle", "seed": organism.config.seed}), cyl


def synthetic_penalty_map(organism: PlantedCylinder, cylinder=None, *, strengths=None, ps=None):
    """Penalty scan against the oracle: v_i(L, p) from each test sample's own diff vector. Returns PenaltyMap."""
    cyl = cylinder if cylinder is not None else fit_cylinder(organism.train, seed=organism.config.seed)
    L = np.linspace(6.0 / 25, 6.0, 25) if strengths is None else np.asarray(strengths, np.float64)
    P = penalty_grid(20) if ps is None else np.asarray(ps, np.float64)
    V = penalty_vector(organism.test, cyl.axis, L[:, None, None], P[None, :, None])   # [K, P, S, d]
    lab = organism.judge(V)                                                            # [K, P, S]
    cos = organism.test @ cyl.axis / np.linalg.norm(organism.test, axis=1)
    return PenaltyMap(labels=np.transpose(lab, (2, 1, 0)), ps=P, strengths=L, cos_theta=cos,
                      config={"source": "planted-cylinder oracle", "seed": organism.config.seed})
