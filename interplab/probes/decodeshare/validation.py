"""DecodeShare validated end to end on an organism with a planted shared decode-time subspace (issue 16).

The organism (`interplab.zoo.validation.decodeshare`) is built by construction: every task's decoding reads a
2-dim step code in P, planted at low variance (below the top ten variance directions) and absent from the prefill.
The unchanged method API runs on it (`collect_decode_states`, `collect_prefill_states`, `shared_subspace`,
`loto_subspaces`, `energy_pool`, `alpha_matched_control`, `k_matched_control`, `haar_basis`, `principal_angles`,
`generate_exact_match` under `decode_projection`), and recovery is scored against P:

- estimator: largest principal angle between the estimated Q_S and P (all decode states, and a count-matched
  subsample with the prefill set per seed);
- decode-only removal (alpha = 1) of Q_S against: alpha-matched and k-matched energy controls (non-shared pool),
  an energy-matched Haar control (a Haar k_S-plane with alpha_C^2 E_C = alpha_S^2 E_S, the spec's
  `haar_energy_matched`), a plain Haar plane, and the top-k_S variance directions; the accuracy drop of Q_S must be
  >= 3x each control's;
- negative control: the prefill-estimated shared subspace must not recover P, and removing it must not hurt;
- LOTO: per held-out task, Q_S from the other tasks vs an energy-matched Haar control.
Seeds drive the Haar draws and the count-matched subsample (the organism and its prompts are deterministic).
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from interplab.core.errors import ConfigError
from interplab.core.result import Result
from interplab.probes import stats

CONTROLS = ("alpha_match", "k_match", "haar_energy", "haar", "topk_variance", "prefill_estimated")
TARGETS = (("max_angle", "<=", 15.0), ("prefill_max_angle", ">", 15.0),
           *((f"ratio_{c}", ">=", 3.0) for c in ("alpha_match", "k_match", "haar_energy", "topk_variance")))


@dataclass
class DecodeShareValidation(Result):
    """Recovery of a planted shared decode-time subspace, per seed, with its controls.

    per_seed: one row per seed: max_angle / matched_max_angle (estimated Q_S vs P on all decode states / on a
        count-matched subsample), prefill_max_angle, k_s, k_pool, base_acc, acc_<condition> and drop_<condition>
        for shared and every control, ratio_<control> = drop_shared / drop_control (inf when the control costs
        nothing). loto: one row per (seed, held-out task): accuracy after removing the fold's Q_S and its
        energy-matched Haar control. settings: what was run."""

    per_seed: pd.DataFrame
    loto: pd.DataFrame
    settings: dict = field(default_factory=dict)

    def recovery_table(self) -> pd.DataFrame:
        """One row per target over seeds (`stats.target_row`, the NaN policy of every recovery table)."""
        return pd.DataFrame([{"metric": metric, **stats.target_row(self.per_seed[metric], op, thr)}
                             for metric, op, thr in TARGETS])

    def passed(self) -> bool:
        return bool(self.recovery_table()["pass"].all())

    def summary(self) -> dict:
        return {"passed": self.passed(), **{f"{r.metric}_min": r.min for r in self.recovery_table().itertuples()},
                "settings": self.settings}

    def to_frame(self) -> pd.DataFrame:
        return self.per_seed


def _accuracy(model, prompts, answers, layer, basis, alpha, max_new_tokens) -> float:
    from interplab.probes.decodeshare.evaluation import decode_projection
    from interplab.probes.decodeshare.model import generate_exact_match

    edits = [decode_projection(layer, basis, alpha, "plain")] if basis is not None and basis.shape[1] else None
    return float(generate_exact_match(model, prompts, answers, max_new_tokens=max_new_tokens, edits=edits).accuracy)


def _seed_row(model, dec, pre, ss, ss_pre, P, prompts, answers, *, layer, alpha, max_new_tokens, base, seed, rho,
              tau) -> dict:
    from interplab.probes.decodeshare import (alpha_matched_control, energy_pool, haar_basis, k_matched_control,
                                              match_state_counts, principal_angles, shared_subspace)

    d, ks = ss.basis.shape[0], ss.basis.shape[1]
    E = np.concatenate(list(dec.values()))
    pool = energy_pool(ss.components, ss.shared_idx)
    am, km = alpha_matched_control(E, ss.basis, pool, alpha), k_matched_control(E, ss.basis, pool, alpha)
    haar = haar_basis(d, ks, seed=seed)
    he = alpha_matched_control(E, ss.basis, haar, alpha)      # Haar plane, alpha matched on energy
    conds = {"shared": (ss.basis, alpha), "alpha_match": (am.basis, am.alpha), "k_match": (km.basis, km.alpha),
             "haar_energy": (he.basis, he.alpha), "haar": (haar, alpha),
             "topk_variance": (ss.components[:, :ks], alpha), "prefill_estimated": (ss_pre.basis[:, :ks], alpha)}
    row = {"seed": seed, "k_s": ks, "k_pool": pool.shape[1], "base_acc": base,
           "max_angle": float(principal_angles(ss.basis, P).max()) if ks else 90.0,
           "prefill_max_angle": float(principal_angles(ss_pre.basis, P).max()) if ss_pre.basis.shape[1] else 90.0,
           "alpha_match_alpha": am.alpha, "k_match_k": km.basis.shape[1], "haar_energy_alpha": he.alpha}
    dm, _ = match_state_counts(dec, pre, seed=seed)
    ssm = shared_subspace(dm, rho=rho, tau=tau, seed=seed)
    row["matched_max_angle"] = float(principal_angles(ssm.basis, P).max()) if ssm.basis.shape[1] else 90.0
    for name, (basis, a) in conds.items():
        acc = _accuracy(model, prompts, answers, layer, basis, a, max_new_tokens)
        row[f"acc_{name}"], row[f"drop_{name}"] = acc, base - acc
    for c in CONTROLS:
        row[f"ratio_{c}"] = row["drop_shared"] / row[f"drop_{c}"] if row[f"drop_{c}"] > 0 else float("inf")
    return row


def _loto_rows(model, dec, tasks, *, layer, alpha, max_new_tokens, seed, rho, tau) -> list[dict]:
    from interplab.probes.decodeshare import alpha_matched_control, haar_basis, loto_subspaces

    folds = loto_subspaces(dec, rho=rho, tau=tau)
    rows = []
    for t, fold in folds.items():
        prompts, answers = [r["prompt"] for r in tasks[t]], [r["answer"] for r in tasks[t]]
        rest = np.concatenate([dec[n] for n in dec if n != t])
        ks = fold.basis.shape[1]
        row = {"seed": seed, "held_out": t, "k_s": ks, "acc_base": _accuracy(model, prompts, answers, layer, None, 0,
                                                                             max_new_tokens)}
        row["acc_loto_removed"] = _accuracy(model, prompts, answers, layer, fold.basis, alpha, max_new_tokens)
        if ks:
            he = alpha_matched_control(rest, fold.basis, haar_basis(fold.basis.shape[0], ks, seed=seed), alpha)
            row["acc_loto_haar_energy"] = _accuracy(model, prompts, answers, layer, he.basis, he.alpha,
                                                    max_new_tokens)
        rows.append(row)
    return rows


def validate_decodeshare(*, seeds: Sequence[int] = (0, 1, 2), layer: int = 0, rho: float = 0.95, tau: float = 1e-3,
                         alpha: float = 1.0, max_new_tokens: int = 6, workdir=None,
                         backend: str = "bridge") -> DecodeShareValidation:
    """Build the planted organism under `workdir` (a temporary folder by default), estimate its shared subspace
    from decode states, and score recovery and decode-only removal against the controls (module docstring)."""
    import interplab
    from interplab.probes.decodeshare import collect_decode_states, collect_prefill_states, shared_subspace
    from interplab.zoo.validation.decodeshare import build_planted_decode_organism, planted_basis, task_prompts

    if not seeds:
        raise ConfigError("need at least one seed")
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="interplab-validate-decodeshare-")
        workdir = tmp.name
    path = build_planted_decode_organism(Path(workdir) / "planted-decodeshare")
    model = interplab.load_model(str(path), backend=backend, device="cpu")
    tasks = task_prompts()
    by_task = {t: [r["prompt"] for r in rows] for t, rows in tasks.items()}
    prompts = [r["prompt"] for rows in tasks.values() for r in rows]
    answers = [r["answer"] for rows in tasks.values() for r in rows]
    dec = collect_decode_states(model, by_task, layer=layer, max_new_tokens=max_new_tokens)
    pre = collect_prefill_states(model, by_task, layer=layer)
    ss, ss_pre = shared_subspace(dec, rho=rho, tau=tau), shared_subspace(pre, rho=rho, tau=tau)
    base = _accuracy(model, prompts, answers, layer, None, 0, max_new_tokens)
    P = planted_basis()
    kw = dict(layer=layer, alpha=alpha, max_new_tokens=max_new_tokens, rho=rho, tau=tau)
    rows, loto = [], []
    for seed in seeds:
        rows.append(_seed_row(model, dec, pre, ss, ss_pre, P, prompts, answers, base=base, seed=int(seed), **kw))
        loto += _loto_rows(model, dec, tasks, seed=int(seed), **kw)
    settings = {"seeds": list(seeds), "layer": layer, "rho": rho, "tau": tau, "alpha": alpha,
                "max_new_tokens": max_new_tokens, "variant": "plain (decode-only)",
                "n_decode_states": {t: int(v.shape[0]) for t, v in dec.items()},
                "n_prefill_states": {t: int(v.shape[0]) for t, v in pre.items()},
                "organism": "zoo.validation.decodeshare (by construction)"}
    res = DecodeShareValidation(per_seed=pd.DataFrame(rows), loto=pd.DataFrame(loto), settings=settings)
    if tmp is not None:
        tmp.cleanup()
    return res
