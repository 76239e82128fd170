"""Generic subspace tools: orthonormal bases, projectors, principal angles, overlap, energy ratios, Haar-random
bases and the "same budget" controls of DecodeShare (variance-matched non-shared components, alpha-matched and
k-matched energy controls), plus the steering-overlap quantities sh(v) and the repaired vector.

Everything here is a pure numpy function of arrays (float64 by default); nothing runs a model. A *basis* is a
[d, k] array whose columns span the subspace; functions that need an orthonormal basis say so and
`orthonormalize` makes one. Definitions follow the DecodeShare spec (methods/decodeshare.md, sections 2 and 4):

* overlap(Qa, Qb) = ||Qa^T Qb||_F^2 / min(ka, kb) = mean cos^2 of the principal angles;
* principal angles = arccos of the singular values of Qa^T Qb;
* energy ratio r(h; Q) = ||Q^T h||^2 / ||h||^2, whose expectation over a Haar-random k-dim subspace is k/d;
* steering overlap sh(v) = ||Q^T v|| / ||v|| and the repaired vector v_beta = (I - beta Q Q^T) v.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from interplab.core.errors import ConfigError, InputError, ShapeError
from interplab.core.record import Record
from interplab.core.shapes import as_2d as _as2d, orthonormalize
from interplab.probes.linalg import haar_basis, principal_angles  # one implementation, shared with the atlas

__all__ = [
    "orthonormalize", "check_basis", "projector", "project_out", "principal_angles", "angle_summary", "AngleSummary",
    "subspace_overlap", "energy_ratio", "mean_energy", "haar_basis", "variance_matched_control",
    "energy_pool", "alpha_matched_control", "k_matched_control", "cumulative_energy", "EnergyControl",
    "steering_overlap", "repair_vector", "spectrum_matched_basis",
]


def check_basis(basis, d: int | None = None, *, atol: float = 1e-6, name: str = "basis") -> np.ndarray:
    """Validate that `basis` is [d, k] with orthonormal columns (Q^T Q = I within atol); return it as an array."""
    b = _as2d(basis, name)
    if d is not None and b.shape[0] != d:
        raise ShapeError(f"{name} has {b.shape[0]} rows but the states have d = {d}; pass a basis of shape [{d}, k]")
    if b.shape[1]:
        g = b.T.astype(np.float64) @ b.astype(np.float64)
        err = np.abs(g - np.eye(b.shape[1])).max()
        if err > atol:
            raise InputError(f"{name} columns are not orthonormal (max |Q^T Q - I| = {err:.2e}); "
                             "call interplab.core.shapes.orthonormalize(basis) first")
    return b


def projector(basis) -> np.ndarray:
    """P = Q Q^T for the orthonormalised basis (a [d, d] symmetric idempotent matrix)."""
    q = orthonormalize(basis)
    return q @ q.T


def project_out(h, basis, alpha: float = 1.0) -> np.ndarray:
    """h~ = h - alpha Q Q^T h for rows h [..., d] and an orthonormal basis Q [d, k]."""
    h = np.asarray(h)
    q = check_basis(basis, h.shape[-1])
    if alpha == 0 or q.shape[1] == 0:
        return h.copy()
    return h - alpha * (h @ q) @ q.T


class AngleSummary(Record):
    """`angle_summary`: mean, p50, p95, min, max (degrees, NaN when empty), n (angles)."""

    KEYS = ("mean", "p50", "p95", "min", "max", "n")


def angle_summary(angles) -> AngleSummary:
    """mean, p50 and p95 (and min/max) of an array of principal angles, as an `AngleSummary` (a dict)."""
    a = np.asarray(angles, dtype=np.float64)
    if a.size == 0:
        return AngleSummary(mean=float("nan"), p50=float("nan"), p95=float("nan"), min=float("nan"),
                            max=float("nan"), n=0)
    return AngleSummary(mean=float(a.mean()), p50=float(np.percentile(a, 50)), p95=float(np.percentile(a, 95)),
                        min=float(a.min()), max=float(a.max()), n=int(a.size))


def subspace_overlap(qa, qb) -> float:
    """||Qa^T Qb||_F^2 / min(ka, kb) in [0, 1] (the mean cos^2 of the principal angles)."""
    a, b = orthonormalize(qa), orthonormalize(qb)
    if a.shape[0] != b.shape[0]:
        raise ShapeError(f"bases live in different spaces: {a.shape[0]} vs {b.shape[0]} rows")
    k = min(a.shape[1], b.shape[1])
    if k == 0:
        return float("nan")
    return float(np.sum((a.T @ b) ** 2) / k)


def energy_ratio(h, basis) -> np.ndarray:
    """r(h; Q) = ||Q^T h||^2 / ||h||^2 per row of h [..., d] (Q orthonormal [d, k]); rows with h = 0 give 0."""
    h = np.asarray(h, dtype=np.float64)
    q = check_basis(basis, h.shape[-1])
    num = np.sum((h @ q) ** 2, axis=-1)
    den = np.sum(h ** 2, axis=-1)
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def mean_energy(h, basis) -> float:
    """E(Q) = mean over rows of ||Q^T h||^2 (the removed energy at alpha = 1)."""
    h = np.asarray(h, dtype=np.float64)
    if h.ndim != 2:
        raise ShapeError(f"states must be [n, d]; got {h.shape}")
    q = check_basis(basis, h.shape[1])
    return float(np.mean(np.sum((h @ q) ** 2, axis=1))) if q.shape[1] else 0.0


def variance_matched_control(components, pooled_variance, shared_idx) -> np.ndarray:
    """The H2 "Rand(full)" control: pair each shared component (in order) greedily, without replacement, with the
    non-shared component whose pooled variance is closest, and return the QR'd basis of the chosen components.

    components [d, k] (pooled-PCA columns), pooled_variance [k] (mean over tasks of each component's variance),
    shared_idx: indices of the shared components."""
    comp = _as2d(components, "components")
    var = np.asarray(pooled_variance, dtype=np.float64).reshape(-1)
    if var.shape[0] != comp.shape[1]:
        raise ShapeError(f"pooled_variance has {var.shape[0]} entries for {comp.shape[1]} components")
    sidx = np.asarray(shared_idx, dtype=np.int64).reshape(-1)
    others = np.setdiff1d(np.arange(comp.shape[1]), sidx)
    if len(others) < len(sidx):
        raise ConfigError(f"only {len(others)} non-shared components for {len(sidx)} shared ones; a variance-matched "
                          "control needs at least as many (raise rho to keep more pooled components)")
    avail = list(others)
    chosen = []
    for i in sidx:
        j = int(np.argmin(np.abs(var[avail] - var[i])))
        chosen.append(avail.pop(j))
    return orthonormalize(comp[:, chosen])


def energy_pool(components, shared_idx) -> np.ndarray:
    """Pool for the energy controls: the non-shared components with span(Q_S) projected out, QR'd, in PCA order."""
    comp = _as2d(components, "components").astype(np.float64)
    sidx = np.asarray(shared_idx, dtype=np.int64).reshape(-1)
    others = np.setdiff1d(np.arange(comp.shape[1]), sidx)
    qs = orthonormalize(comp[:, sidx])
    rest = comp[:, others]
    if qs.shape[1]:
        rest = rest - qs @ (qs.T @ rest)
    return orthonormalize(rest)


def cumulative_energy(states, pool) -> np.ndarray:
    """cumE(k) = mean ||pool[:, :k]^T h||^2 for k = 1..K_pool (monotone non-decreasing)."""
    h = np.asarray(states, dtype=np.float64)
    if h.ndim != 2:
        raise ShapeError(f"states must be [n, d]; got {h.shape}")
    p = check_basis(pool, h.shape[1], name="pool")
    return np.cumsum(np.mean((h @ p) ** 2, axis=0))


@dataclass
class EnergyControl:
    """An energy-matched control: basis [d, k_c], its strength alpha, and the energies it was matched on."""
    basis: np.ndarray
    alpha: float
    energy_shared: float   # E_S = mean ||Q_S^T h||^2
    energy_control: float  # E_C = mean ||Q_C^T h||^2
    rule: str

    @property
    def k(self) -> int:
        return int(self.basis.shape[1])


def alpha_matched_control(states, shared_basis, pool, alpha_shared: float = 1.0) -> EnergyControl:
    """alpha-match: Q_C = pool[:, :k_S] and alpha_C = alpha_S sqrt(E_S / E_C), so alpha_C^2 E_C = alpha_S^2 E_S."""
    h = np.asarray(states, dtype=np.float64)
    qs = check_basis(shared_basis, h.shape[1], name="shared_basis")
    p = check_basis(pool, h.shape[1], name="pool")
    ks = qs.shape[1]
    if p.shape[1] < ks:
        raise ConfigError(f"the energy pool has {p.shape[1]} columns, fewer than k_S = {ks}")
    qc = p[:, :ks]
    es, ec = mean_energy(h, qs), mean_energy(h, qc)
    if ec <= 0:
        raise ConfigError("the control subspace carries no energy on these states; alpha cannot be matched")
    return EnergyControl(qc, float(alpha_shared * np.sqrt(es / ec)), es, ec, "alpha_match")


def k_matched_control(states, shared_basis, pool, alpha_shared: float = 1.0, *,
                      rule: Literal["smallest_k_reaching_target", "argmin_clipped"] = "smallest_k_reaching_target"
                      ) -> EnergyControl:
    """k-match: alpha_C = 1 and k_C chosen on cumE(k) against the target alpha_S^2 E_S, clipped to [k_S, K_pool].

    rule="smallest_k_reaching_target" (the paper's wording): the smallest k with cumE(k) >= target;
    rule="argmin_clipped" (the reference code): argmin_k |cumE(k) - target|."""
    h = np.asarray(states, dtype=np.float64)
    qs = check_basis(shared_basis, h.shape[1], name="shared_basis")
    p = check_basis(pool, h.shape[1], name="pool")
    ks, kp = qs.shape[1], p.shape[1]
    if kp < max(ks, 1):
        raise ConfigError(f"the energy pool has {kp} columns, fewer than k_S = {ks}")
    es = mean_energy(h, qs)
    target = alpha_shared ** 2 * es
    cum = cumulative_energy(h, p)
    if rule == "smallest_k_reaching_target":
        hit = np.nonzero(cum >= target)[0]
        kc = int(hit[0]) + 1 if hit.size else kp
    elif rule == "argmin_clipped":
        kc = int(np.argmin(np.abs(cum - target))) + 1
    else:
        raise ConfigError(f"unknown kmatch rule {rule!r}; use 'smallest_k_reaching_target' or 'argmin_clipped'")
    kc = int(np.clip(kc, max(ks, 1), kp))
    return EnergyControl(p[:, :kc], 1.0, es, float(cum[kc - 1]), f"k_match:{rule}")


def steering_overlap(v, basis) -> float:
    """sh(v) = ||Q^T v|| / ||v|| for a vector v [d] and an orthonormal basis Q [d, k]."""
    v = np.asarray(v.detach().cpu().numpy() if hasattr(v, "detach") else v, dtype=np.float64).reshape(-1)
    q = check_basis(basis, v.shape[0])
    n = np.linalg.norm(v)
    if n == 0:
        raise InputError("steering vector has zero norm")
    return float(np.linalg.norm(q.T @ v) / n)


def repair_vector(v, basis, beta: float = 1.0, *, rescale: bool = True) -> np.ndarray:
    """v_beta = (I - beta Q Q^T) v, rescaled to ||v|| when `rescale` (the reference code's convention)."""
    v = np.asarray(v.detach().cpu().numpy() if hasattr(v, "detach") else v, dtype=np.float64).reshape(-1)
    q = check_basis(basis, v.shape[0])
    out = v - beta * q @ (q.T @ v)
    if rescale:
        n = np.linalg.norm(out)
        if n == 0:
            raise InputError("the repaired vector is zero (v lies inside the subspace); cannot rescale it to ||v||")
        out = out * (np.linalg.norm(v) / n)
    return out


def spectrum_matched_basis(states_by_task, k: int, *, seed: int = 0) -> np.ndarray:
    """A random k-dim subspace drawn with the states' covariance spectrum: Q = orth(X^T G), X the task-centred,
    pooled states [n, d] and G [n, k] standard normal, so each column is a draw from N(0, X^T X). The null of a
    quantity that favours high-variance directions (a steering vector's share sh(v)): a Haar plane treats every
    direction alike, this one weighs them as the decode states do.

    states_by_task: {task: [n_t, d]} (or one [n, d] array), centred per task as the shared-subspace estimator
    does. Raises ConfigError when the states span fewer than k directions."""
    items = states_by_task.values() if hasattr(states_by_task, "values") else [states_by_task]
    x = np.concatenate([np.asarray(a, np.float64) - np.asarray(a, np.float64).mean(0) for a in items])
    if k < 1:
        raise ConfigError(f"k must be >= 1; got {k}")
    if x.shape[0] < k + 1:
        raise ConfigError(f"{x.shape[0]} states cannot span a {k}-dim covariance-matched subspace; use k < n")
    g = np.random.default_rng(seed).standard_normal((x.shape[0], k))
    q = orthonormalize(x.T @ g)
    if q.shape[1] < k:
        raise ConfigError(f"the states span only {q.shape[1]} directions; a {k}-dim covariance-matched subspace "
                          "needs more states")
    return q
