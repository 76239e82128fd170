"""The ablation conditions of the DecodeShare study: the decode shared basis and its controls (prefill-estimated,
Haar-random, variance-matched, alpha- and k-matched energy controls), each with its strength and a note."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from interplab.core.errors import ConfigError
from interplab.core.shapes import orthonormalize
from interplab.probes.decodeshare.estimator import SharedSubspace, shared_subspace
from interplab.probes.decodeshare.subspaces import (
    alpha_matched_control, energy_pool, haar_basis, k_matched_control, mean_energy, variance_matched_control,
)

__all__ = ["Condition", "matched_prefill_basis", "build_bases"]


@dataclass
class Condition:
    """One ablation condition: the basis removed (None when the control could not be built), its strength and
    how it was made. energy / target: the energy it removes on the energy states (alpha^2 mean ||Q^T h||^2) and
    the shared removal's at its strength, which the energy controls are asked to match (filled by
    `build_bases`; the other controls report theirs against the same target)."""
    basis: np.ndarray | None
    alpha: float
    note: str
    energy: float | None = None
    target: float | None = None

    def summary(self) -> dict:
        return {"k": None if self.basis is None else int(self.basis.shape[1]), "alpha": self.alpha,
                "note": self.note, "energy": self.energy, "target": self.target}


def matched_prefill_basis(ss_pre: SharedSubspace, k: int, prefill_states=None) -> tuple[np.ndarray, str]:
    """A k-dim basis from the prefill estimator: its shared columns first, then its remaining pooled components in
    variance order (labelled when padding was needed). When the prefill PCA kept fewer than k components and
    `prefill_states` is given, it is redone with rho = 1 (all components) to pad."""
    if k > ss_pre.k and prefill_states is not None:
        full = shared_subspace(prefill_states, **(asdict(ss_pre.config) | {"rho": 1.0}))
        order = list(np.asarray(ss_pre.shared_idx, int)) + [i for i in range(full.k)
                                                             if i not in set(ss_pre.shared_idx)]
        if k <= len(order):
            return orthonormalize(full.components[:, order[:k]]), (
                f"prefill shared set ({ss_pre.k_s}) padded with prefill components (rho = 1) to k = {k}")
    order = list(np.asarray(ss_pre.shared_idx, int)) + [i for i in range(ss_pre.k) if i not in set(ss_pre.shared_idx)]
    if k > len(order):
        raise ConfigError(f"the prefill estimator kept only {ss_pre.k} components; cannot build a {k}-dim basis "
                          "(raise rho)")
    note = "prefill shared set" if k <= ss_pre.k_s else (
        f"prefill shared set ({ss_pre.k_s}) padded with top prefill components to k = {k}")
    return orthonormalize(ss_pre.components[:, order[:k]]), note


def build_bases(ss_dec: SharedSubspace, ss_pre: SharedSubspace, energy_states: np.ndarray, *, alpha: float = 1.0,
                seed: int = 0, kmatch_rule: str = "smallest_k_reaching_target",
                prefill_states=None) -> dict[str, Condition]:
    """The ablation conditions by name: shared, prefill-est, haar, var-matched, alpha-match, k-match (a control
    that cannot be built has basis None and says why in its note). energy_states [n, d]: the states the energy
    controls are matched on."""
    ks = ss_dec.k_s
    if ks == 0:
        raise ConfigError("the decode estimator found no shared direction (|S| = 0); lower tau, lower m or set "
                          "empty_fallback_m to run the interventions")
    d = ss_dec.d
    out = {"shared": Condition(ss_dec.basis, alpha, f"decode Q_S, k = {ks}")}
    pb, note = matched_prefill_basis(ss_pre, ks, prefill_states)
    out["prefill-est"] = Condition(pb, alpha, note)
    out["haar"] = Condition(haar_basis(d, ks, seed=seed), alpha, f"Haar-random, k = {ks}, seed {seed}")
    try:
        vm = variance_matched_control(ss_dec.components, ss_dec.pooled_variance(), ss_dec.shared_idx)
        out["var-matched"] = Condition(vm, alpha, "non-shared PCs paired by pooled variance")
    except ConfigError as e:
        out["var-matched"] = Condition(None, alpha, f"skipped: {e}")
    pool = energy_pool(ss_dec.components, ss_dec.shared_idx)
    if pool.shape[1] >= ks:
        am = alpha_matched_control(energy_states, ss_dec.basis, pool, alpha)
        out["alpha-match"] = Condition(am.basis, am.alpha, f"alpha_C = {am.alpha:.3g} (E_S = {am.energy_shared:.3g}, "
                                                           f"E_C = {am.energy_control:.3g})")
        km = k_matched_control(energy_states, ss_dec.basis, pool, alpha, rule=kmatch_rule)
        out["k-match"] = Condition(km.basis, 1.0, f"k_C = {km.k} of {pool.shape[1]} ({kmatch_rule}; E_C = "
                                                  f"{km.energy_control:.3g} vs target "
                                                  f"{alpha ** 2 * km.energy_shared:.3g})")
    else:
        for n in ("alpha-match", "k-match"):
            out[n] = Condition(None, alpha, f"skipped: energy pool has {pool.shape[1]} < k_S columns")
    target = alpha ** 2 * mean_energy(energy_states, ss_dec.basis)
    for c in out.values():
        c.target = float(target)
        if c.basis is not None:
            c.energy = float(c.alpha ** 2 * mean_energy(energy_states, c.basis))
    return out



def patchback_bases(ss_dec: SharedSubspace, ss_pre: SharedSubspace, decode_states, *, controls: bool = True,
                    prefill_states=None, alpha: float = 1.0, seed: int = 0) -> dict[str, Condition]:
    """The bases patchback writes back through: the decode-shared subspace alone (controls=False), or with every
    ablation control of `build_bases`, its energy controls matched on all decode states ({task: [n, d]})."""
    if not controls:
        return {"shared": Condition(ss_dec.basis, alpha, "decode Q_S")}
    return build_bases(ss_dec, ss_pre, np.concatenate(list(decode_states.values())), alpha=alpha, seed=seed,
                       prefill_states=prefill_states)
