"""Entropy-matched temperature, the control for "hyperfitting only sharpens the distribution" (spec
methods/hyperfit_geometry.md §2.1-2.2, §4.5).

H(p) = -sum_v p_v log p_v (nats), p_T = softmax(z / T). H_target = mean over held-out teacher-forced positions of the
target (hyperfitted) model's entropy; T* solves mean_t H(softmax(z_base,t / T*)) = H_target by bisection on log T in
[1e-2, 1e2] until |H - H_target| <= 1e-4 nats (H is increasing in T). The per-position variant solves
H(softmax(z_base,t / T_t)) = H_target,t for every position separately. Temperature never changes the argsort, so greedy
decoding is identical at every T: the control is evaluated by sampling.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

from interplab.core.errors import InputError, ShapeError
from interplab.core.result import Result
from interplab.probes.hyperfit.inputs import teacher_forced_logits

__all__ = [
    "entropy", "entropy_curve", "matched_temperature_from_logits", "per_position_temperature_from_logits",
    "entropy_matched_temperature", "match_temperature", "TemperatureMatch", "per_position_matched_temperature",
    "PerPositionTemperature",
]


# ----------------------------------------------------------------------------------------------------------------
# entropy and temperature
# ----------------------------------------------------------------------------------------------------------------
def entropy(logits: torch.Tensor, temperature: float | torch.Tensor = 1.0) -> torch.Tensor:
    """Entropy (nats) of softmax(logits / T) over the last axis, computed in float64. `temperature` may be a tensor
    broadcastable to logits.shape[:-1] (per-position temperatures)."""
    z = logits.to(torch.float64)
    T = torch.as_tensor(temperature, dtype=torch.float64, device=z.device)
    if T.ndim > 0:
        T = T[..., None]
    logp = torch.log_softmax(z / T, dim=-1)
    p = logp.exp()
    return -(p * logp).nan_to_num(0.0).sum(-1)


def _as_chunks(logits) -> list[torch.Tensor]:
    if isinstance(logits, torch.Tensor):
        logits = [logits]
    chunks = [torch.as_tensor(c) for c in logits]
    if not chunks:
        raise InputError("no logits given")
    for c in chunks:
        if c.ndim != 2:
            raise ShapeError(f"logit chunks must be [n_positions, vocab]; got {tuple(c.shape)}")
    return chunks


def entropy_curve(logits, temperatures: Sequence[float]) -> np.ndarray:
    """Mean entropy over positions at each temperature (for the H(T) figure). logits: [N, V] or a list of chunks."""
    chunks = _as_chunks(logits)
    n = sum(c.shape[0] for c in chunks)
    return np.array([sum(float(entropy(c, T).sum()) for c in chunks) / n for T in temperatures])


def _bisect_log_t(f: Callable[[float], float], target: float, bounds: tuple[float, float], tol: float,
                  max_iter: int = 200) -> tuple[float, float, int]:
    """Solve f(T) = target for increasing f by bisection on log T. Returns (T, f(T), iterations); clamps to a bound
    when the target lies outside [f(lo), f(hi)]."""
    lo, hi = math.log(bounds[0]), math.log(bounds[1])
    f_lo, f_hi = f(math.exp(lo)), f(math.exp(hi))
    if target <= f_lo + tol:
        return math.exp(lo), f_lo, 0
    if target >= f_hi - tol:
        return math.exp(hi), f_hi, 0
    mid, f_mid = lo, f_lo
    for it in range(1, max_iter + 1):
        mid = 0.5 * (lo + hi)
        f_mid = f(math.exp(mid))
        if abs(f_mid - target) <= tol:
            return math.exp(mid), f_mid, it
        if f_mid < target:
            lo = mid
        else:
            hi = mid
    return math.exp(mid), f_mid, max_iter


def matched_temperature_from_logits(logits, target_entropy: float, *, bounds=(1e-2, 1e2),
                                    tol: float = 1e-4) -> float:
    """T such that the mean entropy of softmax(logits / T) over positions equals `target_entropy` (nats) to `tol`."""
    chunks = _as_chunks(logits)
    n = sum(c.shape[0] for c in chunks)

    def f(T: float) -> float:
        return sum(float(entropy(c, T).sum()) for c in chunks) / n

    return _bisect_log_t(f, float(target_entropy), bounds, tol)[0]


def per_position_temperature_from_logits(logits: torch.Tensor, target_entropies: torch.Tensor, *,
                                         bounds=(1e-2, 1e2), tol: float = 1e-4, max_iter: int = 100) -> torch.Tensor:
    """Per-position T_t with H(softmax(z_t / T_t)) = H_target,t (vectorised bisection on log T; clamped to `bounds`
    where the target entropy is unreachable, e.g. above log V)."""
    z = torch.as_tensor(logits)
    h = torch.as_tensor(target_entropies, dtype=torch.float64, device=z.device)
    if z.ndim != 2 or h.shape != z.shape[:1]:
        raise ShapeError(f"logits must be [N, V] and target_entropies [N]; got {tuple(z.shape)} and {tuple(h.shape)}")
    lo = torch.full_like(h, math.log(bounds[0]))
    hi = torch.full_like(h, math.log(bounds[1]))
    f_lo, f_hi = entropy(z, lo.exp()), entropy(z, hi.exp())
    mid = 0.5 * (lo + hi)
    done = torch.zeros_like(h, dtype=torch.bool)
    result = torch.empty_like(h)
    below, above = h <= f_lo + tol, h >= f_hi - tol
    result[below], result[above] = lo[below], hi[above]
    done |= below | above
    for _ in range(max_iter):
        if bool(done.all()):
            break
        mid = 0.5 * (lo + hi)
        f_mid = entropy(z, mid.exp())
        hit = (f_mid - h).abs() <= tol
        newly = hit & ~done
        result[newly] = mid[newly]
        done |= hit
        go_up = f_mid < h
        lo = torch.where(go_up, mid, lo)
        hi = torch.where(go_up, hi, mid)
    result[~done] = mid[~done]
    return result.exp()


@dataclass
class TemperatureMatch(Result):
    """Result of the entropy-matched temperature control.

    Fields: T (T*), target_entropy (mean teacher-forced entropy of the target), base_entropy (base at T = 1),
    matched_entropy (base at T*), n_positions, tol, temperatures/curve (base mean entropy on a log-spaced T grid,
    for the H(T) figure), model_base/model_target (names)."""

    T: float
    target_entropy: float
    base_entropy: float
    matched_entropy: float
    n_positions: int
    tol: float
    temperatures: list = field(default_factory=list)
    curve: list = field(default_factory=list)
    model_base: str = ""
    model_target: str = ""

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame({"temperature": self.temperatures, "base_entropy": self.curve})


def match_temperature(model_base, model_target, texts: Sequence[str], *, batch_size: int = 16,
                      max_tokens: int | None = None, bounds=(1e-2, 1e2), tol: float = 1e-4,
                      cache_bytes: int = 2 * 2**30, curve_points: int = 41) -> TemperatureMatch:
    """Entropy-matched temperature with details. Base logits are kept on the CPU (float32) when they fit in
    `cache_bytes`; otherwise every bisection step re-runs the base model over the texts (slower, O(batch) memory)."""
    chunks: list[torch.Tensor] | None = []
    h_sum, n, size = 0.0, 0, 0
    for zb, zt, _ in teacher_forced_logits(model_base, model_target, texts, batch_size, max_tokens):
        h_sum += float(entropy(zt).sum())
        n += zb.shape[0]
        if chunks is not None:
            size += zb.numel() * 4
            chunks = chunks + [zb.cpu()] if size <= cache_bytes else None
    if n == 0:
        raise InputError("the texts produced no teacher-forced positions (every text needs >= 2 tokens)")
    h_target = h_sum / n

    if chunks is not None:
        def mean_h(T: float) -> float:
            return sum(float(entropy(c, T).sum()) for c in chunks) / n
    else:
        def mean_h(T: float) -> float:
            tot = 0.0
            for zb, _, _ in teacher_forced_logits(model_base, None, texts, batch_size, max_tokens):
                tot += float(entropy(zb, T).sum())
            return tot / n

    T, h_matched, _ = _bisect_log_t(mean_h, h_target, bounds, tol)
    temps = np.exp(np.linspace(math.log(bounds[0]), math.log(bounds[1]), curve_points)).tolist() \
        if chunks is not None else []
    curve = [mean_h(t) for t in temps]
    return TemperatureMatch(T=T, target_entropy=h_target, base_entropy=mean_h(1.0), matched_entropy=h_matched,
                            n_positions=n, tol=tol, temperatures=temps, curve=curve,
                            model_base=str(getattr(model_base, "name", "")),
                            model_target=str(getattr(model_target, "name", "")))


def entropy_matched_temperature(model_base, model_target, texts: Sequence[str], *, batch_size: int = 16,
                                max_tokens: int | None = None, bounds=(1e-2, 1e2), tol: float = 1e-4) -> float:
    """T* such that the base model's mean teacher-forced entropy at temperature T* equals the target's mean entropy
    at T = 1 (to `tol` nats), by bisection on log T. See `match_temperature` for the details object."""
    return match_temperature(model_base, model_target, texts, batch_size=batch_size, max_tokens=max_tokens,
                             bounds=bounds, tol=tol, curve_points=0).T


@dataclass
class PerPositionTemperature(Result):
    """Per-position matched temperatures T_t (one per teacher-forced position) with the target entropies."""

    T: np.ndarray
    target_entropy: np.ndarray
    base_entropy: np.ndarray

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame({"T": self.T, "target_entropy": self.target_entropy, "base_entropy": self.base_entropy})

    def summary(self) -> dict[str, float]:
        logt = np.log(self.T)
        return {"T_geomean": float(np.exp(logt.mean())), "T_median": float(np.median(self.T)),
                "T_p10": float(np.quantile(self.T, 0.1)), "T_p90": float(np.quantile(self.T, 0.9)),
                "n_positions": int(self.T.size)}


def per_position_matched_temperature(model_base, model_target, texts: Sequence[str], *, batch_size: int = 16,
                                     max_tokens: int | None = None, bounds=(1e-2, 1e2),
                                     tol: float = 1e-4) -> PerPositionTemperature:
    """The stronger control: T_t for every teacher-forced position, matching the target's entropy there."""
    Ts, hts, hbs = [], [], []
    for zb, zt, _ in teacher_forced_logits(model_base, model_target, texts, batch_size, max_tokens):
        ht = entropy(zt)
        Ts.append(per_position_temperature_from_logits(zb, ht, bounds=bounds, tol=tol).cpu())
        hts.append(ht.cpu())
        hbs.append(entropy(zb).cpu())
    if not Ts:
        raise InputError("the texts produced no teacher-forced positions")
    return PerPositionTemperature(torch.cat(Ts).numpy(), torch.cat(hts).numpy(), torch.cat(hbs).numpy())
