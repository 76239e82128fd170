"""The matched-energy alpha sweep of the DecodeShare study (issue 46 §2).

At each strength alpha of the shared removal (h <- h - alpha Q_S Q_S^T h), the energy controls are asked to remove
the same energy, alpha^2 E_S with E_S = mean ||Q_S^T h||^2 over the energy states (spec §4, App. A.2):

* alpha-match: the first k_S columns of the non-shared pool at alpha_C = alpha sqrt(E_S / E_C);
* k-match: alpha_C = 1 and the smallest number of pool columns whose energy reaches the target.

Either can fail to be what it claims: alpha-match needs alpha_C > 1 when the pool's first k_S columns carry less
energy than Q_S (above 1 the edit flips the component's sign, a reflection, not a removal), and k-match cannot
reach the target when the whole pool carries less. `plan_sweep` records, per alpha and control, the target, what
was achieved and the strength used; the study evaluates only the controls that are usable (at target within
`MATCH_TOL`, strength in [0, 1]) and lists the others as not run, with the reason, instead of using them silently.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from interplab.probes.decodeshare.estimator import SharedSubspace
from interplab.probes.decodeshare.subspaces import alpha_matched_control, energy_pool, k_matched_control
from interplab.probes.validity import Check, match_target, setting_range

__all__ = ["MATCH_TOL", "ALPHA_RANGE", "ENERGY_CONTROLS", "SweepControl", "plan_sweep", "controls_frame",
           "control_checks"]

MATCH_TOL = 0.10            # achieved energy within ±10 % of the target counts as matched
ALPHA_RANGE = (0.0, 1.0)    # a projection strength above 1 reflects the component instead of removing it
ENERGY_CONTROLS = ("alpha-match", "k-match")


@dataclass(frozen=True, eq=False)
class SweepControl:
    """One energy control at one shared strength `alpha`: its basis (None when it could not be built), its own
    strength alpha_c, the energy it was asked to remove (target = alpha^2 E_S) and the energy it removes
    (achieved = alpha_c^2 E_C), both on the energy states."""
    control: str
    alpha: float
    basis: np.ndarray | None
    alpha_c: float
    target: float
    achieved: float
    note: str

    @property
    def k(self) -> int:
        return 0 if self.basis is None else int(self.basis.shape[1])

    @property
    def ratio(self) -> float:
        return self.achieved / self.target if self.target > 0 else float("nan")

    def checks(self) -> tuple[Check, Check]:
        """match_target (achieved vs target energy) and setting_range (alpha_c in [0, 1])."""
        return control_checks({"control": self.control, "alpha": self.alpha, "achieved": self.achieved,
                               "target": self.target, "alpha_c": self.alpha_c})

    @property
    def usable(self) -> bool:
        return self.basis is not None and all(c.passed for c in self.checks())


def plan_sweep(energy_states: np.ndarray, ss: SharedSubspace, alphas: Sequence[float], *,
               kmatch_rule: str = "smallest_k_reaching_target") -> list[SweepControl]:
    """The alpha- and k-matched controls of the shared subspace `ss` at every alpha > 0 of `alphas`, matched on
    `energy_states` [n, d] (the pool: `energy_pool` of the estimator's non-shared components)."""
    pool = energy_pool(ss.components, ss.shared_idx)
    out = []
    for a in (float(x) for x in alphas):
        if a <= 0:
            continue
        if pool.shape[1] < ss.k_s:
            note = f"not built: the energy pool has {pool.shape[1]} < k_S = {ss.k_s} columns"
            out += [SweepControl(c, a, None, float("nan"), float("nan"), float("nan"), note)
                    for c in ENERGY_CONTROLS]
            continue
        am = alpha_matched_control(energy_states, ss.basis, pool, a)
        km = k_matched_control(energy_states, ss.basis, pool, a, rule=kmatch_rule)
        target = a ** 2 * am.energy_shared
        out.append(SweepControl("alpha-match", a, am.basis, am.alpha, target, am.alpha ** 2 * am.energy_control,
                                f"k_C = {am.k}, alpha_C = {am.alpha:.3g}"))
        out.append(SweepControl("k-match", a, km.basis, 1.0, target, km.energy_control,
                                f"k_C = {km.k} of {pool.shape[1]} ({kmatch_rule})"))
    return out


def controls_frame(plan: Sequence[SweepControl]) -> pd.DataFrame:
    """One row per (control, alpha): k_c, alpha_c, target and achieved energy, their ratio, whether the control is
    at its target and in range, and whether the sweep evaluated it (usable)."""
    rows = []
    for c in plan:
        mt, sr = c.checks()
        rows.append({"control": c.control, "alpha": c.alpha, "k_c": c.k, "alpha_c": c.alpha_c, "target": c.target,
                     "achieved": c.achieved, "ratio": c.ratio, "at_target": mt.passed, "in_range": sr.passed,
                     "evaluated": c.usable, "note": c.note})
    return pd.DataFrame(rows, columns=["control", "alpha", "k_c", "alpha_c", "target", "achieved", "ratio",
                                       "at_target", "in_range", "evaluated", "note"])


def control_checks(row) -> tuple[Check, Check]:
    """The match_target and setting_range checks of one control at one alpha (a `controls_frame` row: control,
    alpha, achieved, target, alpha_c), so a saved sweep rebuilds them."""
    subject = f"{row['control']} at alpha {float(row['alpha']):g}"
    return (match_target(row["achieved"], row["target"], subject=subject, quantity="removed energy",
                         rel_tol=MATCH_TOL),
            setting_range(row["alpha_c"], *ALPHA_RANGE, subject=subject, what="control strength alpha_C"))
