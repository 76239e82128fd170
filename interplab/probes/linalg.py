"""Linear algebra that more than one method (and the atlas) needs: principal angles between two subspaces and a
Haar-random orthonormal basis. They live here, outside every method package, so that the methods stay independent
of one another (tests/architecture/test_method_independence.py) while keeping ONE implementation: DecodeShare's
`subspaces` module re-exports both, and every Haar baseline and planted-subspace check draws from the same code."""
from __future__ import annotations

import numpy as np

from interplab.core.errors import ConfigError, ShapeError
from interplab.core.shapes import orthonormalize

__all__ = ["principal_angles", "haar_basis"]


def principal_angles(qa, qb, *, degrees: bool = True) -> np.ndarray:
    """Principal angles between span(qa) and span(qb), ascending, min(ka, kb) of them (bases are orthonormalised)."""
    a, b = orthonormalize(qa), orthonormalize(qb)
    if a.shape[0] != b.shape[0]:
        raise ShapeError(f"bases live in different spaces: {a.shape[0]} vs {b.shape[0]} rows")
    if a.shape[1] == 0 or b.shape[1] == 0:
        return np.zeros(0)
    s = np.clip(np.linalg.svd(a.T @ b, compute_uv=False), -1.0, 1.0)
    ang = np.arccos(s)
    return np.degrees(ang) if degrees else ang


def haar_basis(d: int, k: int, seed: int = 0) -> np.ndarray:
    """A Haar-random orthonormal basis [d, k] (QR of a Gaussian matrix with the sign fix), bitwise reproducible
    for a given (d, k, seed)."""
    if not (0 <= k <= d):
        raise ConfigError(f"need 0 <= k <= d for a random basis; got k={k}, d={d}")
    g = np.random.default_rng(seed).standard_normal((d, k))
    q, r = np.linalg.qr(g)
    return np.ascontiguousarray(q * np.where(np.diag(r) < 0, -1.0, 1.0))
