"""The DecodeShare layer scan (H1): the shared decode subspace at every layer with both estimators and every
threshold, its nulls, decode-vs-prefill principal angles, and the tau/rho sensitivity at one layer."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np
import pandas as pd

from interplab.core.result import Result
from interplab.probes.decodeshare.config import DecodeShareLayersConfig, estimator_kwargs, resolve_layer
from interplab.probes.decodeshare.estimator import (
    SharedSubspace, match_state_counts, null_permutation, null_rotation, sensitivity_sweep, shared_subspace,
)
from interplab.probes.decodeshare.model import collect_decode_states_multi, collect_prefill_states
from interplab.probes.decodeshare.subspaces import angle_summary, principal_angles
from interplab.core.errors import InputError
from interplab.probes.decodeshare.tasks import (
    BUILTIN_DATA, TaskSet, multitask_sets, real_task_sets, resolve_format,
)

__all__ = ["LayerScan", "scan_layers"]


@dataclass
class LayerScan(Result):
    """What `scan_layers` measured. summary: one row per (layer, mode, threshold) with k, |S| (decode, prefill,
    count-matched decode), null p-values and means, angle summaries and the Lemma A.3 bound; sweep: the tau/rho
    sensitivity at `sweep_layer`; angles: decode-vs-prefill principal angles by label; subspaces / prefill_subspaces:
    the SharedSubspace results keyed by `LayerScan.key(layer, mode, threshold label)` (one string, so the scan saves
    and reloads as one result); `subspace(...)` looks one up."""
    summary: pd.DataFrame
    sweep: pd.DataFrame
    sweep_layer: int
    angles: dict[str, np.ndarray] = field(default_factory=dict)
    subspaces: dict[str, SharedSubspace] = field(default_factory=dict)
    prefill_subspaces: dict[str, SharedSubspace] = field(default_factory=dict)

    @staticmethod
    def key(layer: int, mode: str, threshold: str) -> str:
        return f"L{int(layer)}/{mode}/{threshold}"

    def subspace(self, layer: int, mode: str, threshold: str, *, prefill: bool = False) -> SharedSubspace:
        table = self.prefill_subspaces if prefill else self.subspaces
        k = self.key(layer, mode, threshold)
        if k not in table:
            raise InputError(f"the scan has no subspace for layer {layer}, mode {mode!r}, threshold {threshold!r}; "
                             f"it has {sorted(table)}")
        return table[k]

    def entries(self) -> list[tuple[int, str, str]]:
        """(layer, mode, threshold label) of every scanned subspace, in scan order."""
        return [(int(k.split("/")[0][1:]), *k.split("/", 2)[1:]) for k in self.subspaces]

    def to_frame(self):
        return self.summary


def _threshold_label(cfg: DecodeShareLayersConfig, tk: float) -> str:
    return f"tau={cfg.tau:g}" if tk == 0 else f"tau_k={tk:g}"


def _layer_rows(cfg: DecodeShareLayersConfig, scan: LayerScan, layer: int, dec, pre) -> list[dict]:
    """Every (threshold, estimator mode) at one layer: the subspaces, nulls and angles."""
    dm, _ = match_state_counts(dec, pre, seed=cfg.seed)
    rows = []
    for tk in [float(x) for x in cfg.tau_ks] or [0.0]:
        thr = _threshold_label(cfg, tk)
        for mode in ("paper", "repo"):
            kw = estimator_kwargs(cfg, mode) | {"tau_k": tk or None}
            ss = shared_subspace(dec, **kw)
            sp = shared_subspace(pre, **kw)
            sdm = shared_subspace(dm, **kw)
            n1 = null_permutation(ss, B=cfg.null_perm_B, seed=cfg.seed)
            n2 = null_rotation(dec, ss, B=cfg.null_rot_B, seed=cfg.seed) if cfg.null_rot_B > 0 else None
            ang = principal_angles(ss.basis, sp.basis)
            angm = principal_angles(sdm.basis, sp.basis)
            scan.angles[f"L{layer} {mode} {thr}: decode vs prefill"] = ang
            scan.subspaces[scan.key(layer, mode, thr)] = ss
            scan.prefill_subspaces[scan.key(layer, mode, thr)] = sp
            rows.append({"layer": layer, "mode": mode, "threshold": thr, "tau_used": ss.tau, "k": ss.k,
                         "k_s": ss.k_s, "k_s_prefill": sp.k_s, "k_s_decode_matched": sdm.k_s,
                         "n_states": int(sum(ss.n_rows.values())),
                         "p_perm": n1.p, "null_perm_mean": float(n1.null.mean()),
                         "p_rot": n2.p if n2 else np.nan,
                         "null_rot_mean": float(n2.null.mean()) if n2 else np.nan,
                         "angle_mean": angle_summary(ang)["mean"], "angle_p95": angle_summary(ang)["p95"],
                         "angle_mean_matched": angle_summary(angm)["mean"], "bound": ss.bound})
    return rows


def scan_layers(model, cfg: DecodeShareLayersConfig, *, progress: Callable[[str], None] | None = None,
                calib_sets: Mapping[str, TaskSet] | None = None) -> LayerScan:
    """Shared subspace at each layer of `cfg.layers` (paper and repo modes, every threshold of `cfg.tau_ks`) with
    nulls and decode-vs-prefill angles; decode states of all layers come from one generation pass.
    calib_sets: your own calibration TaskSets (`user_task_sets(...)[0]`; the first `cfg.n_calib` prompts of each
    task) instead of the organisms' `cfg.tasks`. cfg.data = 'real-tasks': the calibration split of the built-in
    real-model tasks (`real_task_sets`, the same prompts `run_study` calibrates on)."""
    layers = (list(range(model.n_layers)) if cfg.layers == "all"
              else [resolve_layer(model, int(l)) for l in cfg.layers])
    if calib_sets is None and cfg.data in BUILTIN_DATA:
        calib_sets = real_task_sets(model, cfg.tasks, n_calib=cfg.n_calib, n_eval=0, seed=cfg.seed)[0]
    if calib_sets is not None:
        if len(calib_sets) < 2:
            raise InputError(f"DecodeShare needs at least two tasks; the data has {sorted(calib_sets)}")
        prompts = {t: s.prompts[:cfg.n_calib] for t, s in calib_sets.items()}
    else:
        fmt = resolve_format(cfg.model, cfg.format)
        calib = multitask_sets(model, cfg.tasks, cfg.n_calib, seed=cfg.seed, split="train", fmt=fmt)
        prompts = {t: s.prompts for t, s in calib.items()}
    dec = collect_decode_states_multi(model, prompts, layers=layers, max_new_tokens=cfg.calib_max_new_tokens,
                                      max_states_per_task=cfg.max_states_per_task, seed=cfg.seed,
                                      batch_size=cfg.batch_size)
    scan = LayerScan(pd.DataFrame(), pd.DataFrame(), -1)
    rows = []
    for l in layers:
        if progress:
            progress(f"layer {l}")
        pre = collect_prefill_states(model, prompts, layer=l, batch_size=cfg.batch_size)
        rows += _layer_rows(cfg, scan, l, dec[l], pre)
    scan.summary = pd.DataFrame(rows)
    sl = resolve_layer(model, cfg.sweep_layer)
    if sl not in dec:
        sl = layers[len(layers) // 2]
    scan.sweep_layer = sl
    scan.sweep = sensitivity_sweep(dec[sl], **{k: v for k, v in estimator_kwargs(cfg, "paper").items()
                                               if k not in ("rho", "tau", "tau_k")}, rho=cfg.rho, tau=cfg.tau)
    return scan
