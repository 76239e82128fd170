"""Choosing a TruthProbe gate on the tune split, under a fluency constraint (issue 46 §2).

The paper tunes the gate strength α per model and benchmark with no visible held-out protocol (spec truth_scores.md
§4 "Shipped settings"). interplab tunes on facts disjoint from those it scores, and only among settings that

- lie inside the paper's α range of their mode (`PAPER_ALPHA_RANGES`: normalize 0.1–0.3, the shipped POPE values;
  contrast 4.5–7.5, the shipped HaluEval and CHAIR values). A grid value outside it is refused unless the caller
  asks for it (`allow_out_of_range`); the chosen setting is then flagged by `validity.setting_range`, so its
  verdict is inconclusive. Outside the range the gate is no longer the paper's soft re-weighting: normalize α = 6
  multiplies every layer's best head by 7 in all 30 layers at once, which broke SmolLM2's generation into one
  repeated string;
- pass the degenerate-generation checks on the tune split (`facts_fluency.generation_checks`: no reply repeated in
  more than half the prompts, distinct-token rate ≥ 0.5, at most half the replies above the ungated replies' 95%
  NLL quantile under the ungated model).

Among the eligible settings the highest tune rate wins (ties: the smaller α, then the mode order). The choice is
then checked against noise: the paired bootstrap interval over tune facts of (best − ungated). When it does not lie
above 0, the tune split could not tell the best gate from no gate, and the run says so (`TuneChoice.within_noise`) rather
than present the winner as a tuned setting.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from interplab.core.errors import ConfigError

# The paper's α per mode (spec §4, `LLaVA-NeXT/run_scripts/*`): normalize α 0.1 / 0.2 / 0.3 (POPE), contrast
# α 4.5 / 6.0 / 7.5 (HaluEval, CHAIR). The range is [min, max] of the shipped values.
PAPER_ALPHA_RANGES: dict[str, tuple[float, float]] = {"normalize": (0.1, 0.3), "contrast": (4.5, 7.5)}
PAPER_ALPHAS: dict[str, tuple[float, ...]] = {"normalize": (0.1, 0.2, 0.3), "contrast": (4.5, 6.0, 7.5)}
SELECT_BY = ("generated_context", "forced_choice")


@dataclass(frozen=True)
class GateSetting:
    """One grid point: mode, α and whether α lies in the mode's range."""

    mode: str
    alpha: float
    in_range: bool


def gate_grid(alphas: Mapping[str, Sequence[float]], ranges: Mapping[str, Sequence[float]] = PAPER_ALPHA_RANGES,
              *, allow_out_of_range: bool = False) -> list[GateSetting]:
    """The (mode, α) settings to tune over, in the given order. alphas: {mode: [α, ...]}; ranges: {mode: (lo, hi)}.
    A setting outside its mode's range raises ConfigError unless allow_out_of_range."""
    if not alphas or not any(len(v) for v in alphas.values()):
        raise ConfigError("the gate grid is empty: give at least one mode with one alpha")
    out, outside = [], []
    for mode, values in alphas.items():
        if mode not in ranges:
            raise ConfigError(f"mode {mode!r} has no α range; world-facts gating tunes the modes with one "
                              f"({sorted(ranges)})")
        lo, hi = _range(ranges[mode], mode)
        for a in values:
            a = float(a)
            if not a > 0:
                raise ConfigError(f"{mode} α must be > 0 (α 0 is the ungated model, always measured), got {a:g}")
            ok = lo <= a <= hi
            if not ok:
                outside.append(f"{mode} α={a:g} (range [{lo:g}, {hi:g}])")
            out.append(GateSetting(mode, a, ok))
    if outside and not allow_out_of_range:
        raise ConfigError(f"settings outside the paper's α ranges: {', '.join(outside)}. Choose α inside the range, "
                          "widen the range fields, or set allow_out_of_range=true (the chosen setting is then flagged "
                          "by the setting_range check and its verdict is inconclusive)")
    return out


def _range(r: Sequence[float], mode: str) -> tuple[float, float]:
    if len(r) != 2 or not float(r[0]) <= float(r[1]):
        raise ConfigError(f"the {mode} α range must be [lo, hi] with lo <= hi, got {list(r)}")
    return float(r[0]), float(r[1])


@dataclass(frozen=True)
class TuneChoice:
    """The chosen setting (None when no setting is eligible) and its paired tune interval against no gate.

    diff / lo / hi: best − ungated rate on the tune split, 95% paired bootstrap over tune facts; within_noise: the
    interval does not lie above 0 (the tune split did not show the choice above no gate)."""

    mode: str | None
    alpha: float
    rate: float
    diff: float
    lo: float
    hi: float
    n: int
    within_noise: bool

    def as_dict(self) -> dict:
        return {"mode": self.mode, "alpha": self.alpha, "rate": self.rate, "diff": self.diff, "lo": self.lo,
                "hi": self.hi, "n": self.n, "within_noise": self.within_noise}


def select_setting(tune: pd.DataFrame, by: str = "generated_context") -> pd.Series | None:
    """The eligible gated row of `tune` with the highest `by` rate (ties: smaller α, then table order), or None.
    tune: one row per setting with columns mode, alpha, in_range, allowed, eligible and `by`; the ungated row
    (mode "ungated") is never chosen. A row is a candidate only when eligible (its tune replies passed the
    degeneracy checks) and in range or explicitly allowed."""
    if by not in SELECT_BY:
        raise ConfigError(f"select_by must be one of {SELECT_BY}, got {by!r}")
    cand = tune[(tune["mode"] != "ungated") & tune["eligible"].astype(bool)
                & (tune["in_range"].astype(bool) | tune["allowed"].astype(bool))]
    if cand.empty:
        return None
    order = cand.assign(_pos=np.arange(len(cand)))
    return order.sort_values([by, "alpha", "_pos"], ascending=[False, True, True], kind="stable").iloc[0]


def tune_choice(best: pd.Series | None, flags: Mapping[str, np.ndarray], ungated: np.ndarray, *, by: str,
                seed: int = 0) -> TuneChoice:
    """The interval of the chosen setting against no gate on the tune split. flags: {setting key: [n] 0/1 per tune
    fact} with key f"{mode} {alpha:g}"; ungated: the ungated flags of the same facts."""
    from interplab.probes.stats import intervals

    u = np.asarray(ungated, dtype=float)
    if best is None:
        return TuneChoice(None, float("nan"), float("nan"), float("nan"), float("nan"), float("nan"), len(u), True)
    g = np.asarray(flags[setting_key(best["mode"], best["alpha"])], dtype=float)
    iv = intervals(g - u, method="bootstrap", B=2000, seed=seed)
    return TuneChoice(str(best["mode"]), float(best["alpha"]), float(best[by]), iv.mean, iv.lo, iv.hi, len(u),
                      bool(iv.lo <= 0))


def setting_key(mode: str, alpha: float) -> str:
    return f"{mode} {float(alpha):g}"
