"""Shape helpers shared by edits and probes: 2-D coercion, orthonormal bases, [layer, head] map checks."""
from __future__ import annotations

import numpy as np

from interplab.core.errors import ShapeError


def as_2d(a, name: str) -> np.ndarray:
    """`a` (array or tensor) as a 2-D numpy array; ShapeError naming `name` otherwise."""
    a = np.asarray(a.detach().cpu().numpy() if hasattr(a, "detach") else a)
    if a.ndim != 2:
        raise ShapeError(f"{name} must be a 2-D array [d, k]; got shape {a.shape}")
    return a


def orthonormalize(basis, *, tol: float = 1e-10) -> np.ndarray:
    """An orthonormal basis [d, r] of span(basis) (Householder QR with signs fixed so diag(R) >= 0).

    Columns that are (numerically) linearly dependent on earlier ones are dropped, so r = rank(basis); the result
    spans exactly the same subspace, and its first j columns span the first j input columns when those are
    independent."""
    b = as_2d(basis, "basis").astype(np.float64, copy=False)
    d, k = b.shape
    if k == 0:
        return np.zeros((d, 0))
    if k > d:
        raise ShapeError(f"basis has {k} columns but only {d} rows; a subspace of R^{d} has at most {d} dimensions")
    q, r = np.linalg.qr(b)
    diag = np.diag(r)
    sign = np.where(diag < 0, -1.0, 1.0)
    q = q * sign
    scale = np.abs(diag).max() if diag.size else 0.0
    keep = np.abs(diag) > tol * max(scale, 1e-300)
    return np.ascontiguousarray(q[:, keep])


def check_score_shape(scores, n_layers: int, n_heads: int) -> np.ndarray:
    """Assert a map is [n_layers, n_heads]; a transposed map gets a message saying so."""
    s = np.asarray(scores)
    if s.shape == (n_layers, n_heads):
        return s
    hint = ""
    if s.shape == (n_heads, n_layers):
        hint = " It looks transposed ([head, layer]); Truth-Score maps are indexed [layer, query head]."
    raise ShapeError(f"score map has shape {s.shape}, but the model has n_layers={n_layers}, n_heads={n_heads} "
                     f"(expected ({n_layers}, {n_heads})).{hint}")
