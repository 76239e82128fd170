"""CRH validated end to end on an organism with a planted cylinder and sector detector (issue 16).

The organism (`interplab.zoo.validation.crh`, by construction) puts the concept difference vectors on a known
cylinder (axis u, plane (e1, e2)) at `resid_post.0` and emits the word `concept` iff
κ·⟨x̂, u⟩·‖Px̂‖·g(β) > 1 with g(β) = max(0, cos(β − ψ)). The unchanged method API runs on it (`concept_diffs`,
`fit_cylinder`, `sector_scan` and `penalty_scan` with a `TokenSetJudge(["concept"])`, `pairwise_test`,
`steerability_slope`, `trig_law_scan`) and recovery is scored against the planted truth (spec crh.md §2.3–§5):

- axis_deg: angle between the fitted axis (diffmean) and u;
- plane_deg: largest principal angle between the fitted plane and span(e1, e2);
- centre_deg: |fitted sector centre − ψ|, the fitted centre mapped into the planted (e1, e2) frame (the fit's frame
  may be rotated or reflected);
- map_r: Pearson r between the measured population concept-rate map (AUC over strength, per bin) and the planted g
  at each bin's direction;
- Implication 1: concept rate at p = 0 vs p = 1 of the penalty scan (the planted detector needs the in-plane part,
  so p → 1 must switch the concept off); Implication 3: `pairwise_test` r and its permutation p; Implication 2:
  `trig_law_scan` global r and its max-corrected permutation p (computed and reported; the planted law
  L²·cos θ·sin θ·g(φ) is not of the trig-law form, so no bar is set on it).

Negative controls in the same run, which must fail the map/centre criteria:
- `sector_blind`: an organism with the same cylinder geometry whose detector ignores the sector (g ≡ 1): the map is
  flat, so the sector centre is undefined (NaN) and map_r is NaN or low;
- `rotated_plane`: the planted organism steered with the fitted cylinder's plane replaced by a random plane ⟂ the
  axis (a wrong plane): the detector never sees in-plane mass, so map_r fails.
Seeds draw the organism (frame, ψ, per-sample α/ρ/φ) and the control plane.
"""
from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from interplab.core.errors import ConfigError
from interplab.core.result import Result
from interplab.probes import stats

TARGETS = (("axis_deg", "<=", 10.0), ("plane_deg", "<=", 15.0), ("centre_deg", "<=", 20.0), ("map_r", ">=", 0.9))
CONDITIONS = ("planted", "sector_blind", "rotated_plane")


@dataclass
class CrhValidation(Result):
    """Recovery of a planted CRH mechanism, per seed and condition.

    per_seed: one row per (seed, condition) with axis_deg, plane_deg, centre_deg, map_r, recovered (all four
        targets met), and for `planted` the implication statistics (impl1_rate_p0 / impl1_rate_p1, impl3_r /
        impl3_p, impl2_r / impl2_perm_p). maps: one row per (seed, condition, bin): measured AUC and planted g.
    settings: what was run."""

    per_seed: pd.DataFrame
    maps: pd.DataFrame
    settings: dict = field(default_factory=dict)

    def __post_init__(self):
        need = {"seed", "condition", *(t[0] for t in TARGETS)}
        if not need <= set(self.per_seed.columns):
            raise ConfigError(f"per_seed needs columns {sorted(need)}")

    def recovery_table(self) -> pd.DataFrame:
        """Per condition and target metric: mean, Student-t 95 % interval over seeds, min, max, pass (every seed
        meets the target). The negative controls are expected to fail."""
        rows = []
        for cond in CONDITIONS:
            sub = self.per_seed[self.per_seed.condition == cond]
            if sub.empty:
                continue
            rows += [{"condition": cond, "metric": metric, **stats.target_row(sub[metric], op, thr)}
                     for metric, op, thr in TARGETS]
        return pd.DataFrame(rows)

    def passed(self) -> bool:
        """The planted organism meets every target on every seed."""
        t = self.recovery_table()
        return bool(t[t.condition == "planted"]["pass"].all())

    def controls_fail(self) -> bool:
        """Every negative control misses at least one target on every seed."""
        ps = self.per_seed
        return bool((~ps[ps.condition != "planted"]["recovered"].astype(bool)).all())

    def summary(self) -> dict:
        t = self.recovery_table()
        pl = self.per_seed[self.per_seed.condition == "planted"]
        imp = {c: float(pl[c].mean()) for c in pl.columns if c.startswith("impl")}
        return {"passed": self.passed(), "controls_fail": self.controls_fail(),
                **{f"{r.condition}_{r.metric}_mean": r.mean for r in t.itertuples()}, **imp,
                "settings": self.settings}

    def to_frame(self) -> pd.DataFrame:
        return self.per_seed


def _planted_angle(direction: np.ndarray, truth: dict) -> float:
    return math.atan2(float(direction @ truth["e2"]), float(direction @ truth["e1"]))


def _score(cyl, sm, truth: dict, *, planted_g) -> tuple[dict, pd.DataFrame]:
    """Recovery metrics of one (cylinder, sector map) against the planted truth."""
    from interplab.probes.crh.cylinder import angle_between, max_principal_angle, wrap_angle

    P = np.stack([truth["e1"], truth["e2"]], 1)
    beta = sm.bin_angles
    dirs = np.cos(beta)[:, None] * cyl.plane[:, 0][None] + np.sin(beta)[:, None] * cyl.plane[:, 1][None]
    bin_planted = np.array([_planted_angle(d, truth) for d in dirs])
    g = planted_g(bin_planted - truth["psi"])
    auc = sm.population_auc
    with np.errstate(invalid="ignore"):
        r = float(stats.pearson(auc, g)) if auc.std() > 0 else float("nan")
    c = sm.centre
    if np.isfinite(c):
        cd = math.cos(c) * cyl.plane[:, 0] + math.sin(c) * cyl.plane[:, 1]
        centre_err = abs(math.degrees(float(wrap_angle(_planted_angle(cd, truth) - truth["psi"]))))
    else:
        centre_err = float("nan")
    row = {"axis_deg": angle_between(cyl.axis, truth["axis"]), "plane_deg": max_principal_angle(cyl.plane, P),
           "centre_deg": centre_err, "map_r": r, "concept_rate": float((sm.labels == 2).mean())}
    row["recovered"] = bool(row["axis_deg"] <= 10 and row["plane_deg"] <= 15 and np.isfinite(centre_err)
                            and centre_err <= 20 and np.isfinite(r) and r >= 0.9)
    maps = pd.DataFrame({"bin": np.arange(beta.size), "beta_deg": np.degrees(beta),
                         "planted_beta_deg": np.degrees(bin_planted), "auc": auc, "planted_g": g})
    return row, maps


def _implications(model, prompts, D, cyl, judge, *, layer, n_p, n_strengths, n_perm, seed, gen) -> dict:
    from interplab.probes.crh import pairwise_test, penalty_scan, steerability_slope, strength_grid, trig_law_scan

    L = strength_grid(3.0 * cyl.axis_norm, n_strengths)
    pm = penalty_scan(model, prompts, D, cyl.axis, layer=layer, judge=judge, strengths=L,
                      ps=np.linspace(0.0, 1.0, n_p), **gen)
    rates = (pm.labels == 2).mean(axis=(0, 2))                     # [n_p] concept rate per p
    out = {"impl1_rate_p0": float(rates[0]), "impl1_rate_p1": float(rates[-1])}
    try:
        pt = pairwise_test(D, pm.margins(0), n_perm=n_perm, seed=seed)
        out.update(impl3_r=pt.r, impl3_p=pt.p_perm)
    except Exception:  # noqa: BLE001 - too few activated samples is a result
        out.update(impl3_r=float("nan"), impl3_p=float("nan"))
    cos = pm.cos_theta
    S = steerability_slope(pm.labels[:, 0, None, :])
    try:
        tl = trig_law_scan(np.sqrt(np.clip(1 - cos ** 2, 0, 1)), cos, S, cyl.axis_norm, n_perm=100, seed=seed)
        out.update(impl2_r=tl.global_r, impl2_perm_p=tl.perm_p)
    except Exception:  # noqa: BLE001 - constant steerability is a result
        out.update(impl2_r=float("nan"), impl2_perm_p=float("nan"))
    return out


def _rotated(cyl, seed: int):
    """The cylinder with its plane replaced by a random plane orthogonal to the axis (a wrong plane)."""
    import dataclasses

    rng = np.random.default_rng(10_000 + seed)
    X = rng.standard_normal((cyl.d, 2))
    X -= np.outer(cyl.axis, cyl.axis @ X)
    q, _ = np.linalg.qr(X)
    return dataclasses.replace(cyl, plane=q)


def validate_crh(*, seeds: Sequence[int] = (0, 1, 2), n_samples: int = 48, n_prompts: int = 4, n_bins: int = 24,
                 n_strengths: int = 25, gamma: float = 45.0, n_impl: int = 24, n_p: int = 5, n_perm: int = 500,
                 workdir=None, backend: str = "bridge") -> CrhValidation:
    """Build the planted and sector-blind organisms per seed under `workdir` (temporary by default), run the CRH
    pipeline on them and score recovery (module docstring). n_prompts prompts are steered in the sector scans,
    n_impl samples in the penalty scan behind Implications 1–3."""
    import interplab
    from interplab.probes.crh import TokenSetJudge, concept_diffs, fit_cylinder, sector_scan, strength_grid
    from interplab.zoo.validation.crh import (PlantedCrhSpec, build_planted_crh_organism, load_planted_crh,
                                              planted_crh_pairs, planted_g)

    if not seeds:
        raise ConfigError("need at least one seed")
    if not (1 <= n_prompts <= n_samples and 4 <= n_impl <= n_samples):
        raise ConfigError(f"need 1 ≤ n_prompts ≤ n_samples and 4 ≤ n_impl ≤ n_samples; got {n_prompts}, {n_impl}, "
                          f"{n_samples}")
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="interplab-validate-crh-")
        workdir = tmp.name
    judge = TokenSetJudge(["concept"])
    gen = {"max_new_tokens": 2, "max_rows": 512}
    rows, maps = [], []
    for seed in seeds:
        pairs, prompts = planted_crh_pairs(n_samples, seed=int(seed))
        for blind in (False, True):
            spec = PlantedCrhSpec(n_samples=n_samples, seed=int(seed), sector_blind=blind)
            path = build_planted_crh_organism(Path(workdir) / f"crh-{'blind' if blind else 'planted'}-s{seed}", spec)
            model = interplab.load_model(str(path), backend=backend, device="cpu")
            truth = load_planted_crh(path)
            D = concept_diffs(model, pairs, layer=0)
            cyl = fit_cylinder(D, seed=int(seed), meta={"site": "resid_post.0", "organism": path.name})
            L = strength_grid(3.0 * cyl.axis_norm, n_strengths)
            conds = [("sector_blind", cyl)] if blind else [("planted", cyl), ("rotated_plane", _rotated(cyl, seed))]
            for cond, c in conds:
                sm = sector_scan(model, prompts[:n_prompts], c, layer=0, judge=judge, gamma=gamma, n_bins=n_bins,
                                 strengths=L, keep_texts=False, **gen)
                row, mp = _score(c, sm, truth, planted_g=planted_g)
                row.update(seed=int(seed), condition=cond, cylinder_score=cyl.cylinder_score)
                if cond == "planted":
                    row.update(_implications(model, prompts[:n_impl], D[:n_impl], cyl, judge, layer=0, n_p=n_p,
                                             n_strengths=n_strengths, n_perm=n_perm, seed=int(seed), gen=gen))
                rows.append(row)
                maps.append(mp.assign(seed=int(seed), condition=cond))
    settings = {"seeds": list(seeds), "n_samples": n_samples, "n_prompts": n_prompts, "n_bins": n_bins,
                "n_strengths": n_strengths, "gamma_deg": gamma, "n_impl": n_impl, "n_p": n_p, "n_perm": n_perm,
                "site": "resid_post.0", "judge": "TokenSetJudge(['concept'])",
                "organism": "zoo.validation.crh (by construction)"}
    per_seed = pd.DataFrame(rows)
    lead = ["seed", "condition", *(t[0] for t in TARGETS), "recovered"]
    per_seed = per_seed[lead + [c for c in per_seed.columns if c not in lead]]
    res = CrhValidation(per_seed=per_seed, maps=pd.concat(maps, ignore_index=True), settings=settings)
    if tmp is not None:
        tmp.cleanup()
    return res
