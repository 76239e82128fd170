"""NaN-aware reductions that return NaN (or a stated default) for an all-NaN or empty input instead of warning.

numpy's nanmean/nanmax warn ("Mean of empty slice", "All-NaN slice") and nanargmax raises on such input; a result
with no valid entry is a legitimate outcome here (a sequence too short for any n-gram, a sweep where nothing fired),
so callers say what they want instead of leaking a RuntimeWarning.
"""
from __future__ import annotations

import numpy as np

__all__ = ["finite_mean", "finite_max", "finite_min", "finite_argmax"]


def _finite(x) -> np.ndarray:
    v = np.asarray(x, dtype=np.float64).ravel()
    return v[np.isfinite(v)]


def finite_mean(x, default: float = float("nan")) -> float:
    """Mean over the finite entries of x; `default` when there is none."""
    v = _finite(x)
    return float(v.mean()) if v.size else default


def finite_max(x, default: float = float("nan")) -> float:
    """Max over the finite entries of x; `default` when there is none."""
    v = _finite(x)
    return float(v.max()) if v.size else default


def finite_min(x, default: float = float("nan")) -> float:
    """Min over the finite entries of x; `default` when there is none."""
    v = _finite(x)
    return float(v.min()) if v.size else default


def finite_argmax(x) -> int | None:
    """Flat index of the largest finite entry of x (first on ties); None when there is no finite entry."""
    a = np.asarray(x, dtype=np.float64).ravel()
    ok = np.isfinite(a)
    if not ok.any():
        return None
    return int(np.argmax(np.where(ok, a, -np.inf)))
