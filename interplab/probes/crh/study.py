"""The CRH studies behind the experiments, as typed results.

* `synthetic_study(SyntheticStudyConfig)` -> `SyntheticStudy`: the planted-cylinder generator (spec §7A) over seeds —
  axis / plane / radius / azimuth / sector-centre recovery against the spec's thresholds, the LRH null, the
  Implication-3 replica (independent vs tied sectors), penalty monotonicity and the spiral-probe helix fit.
  Model-free, seconds.
* `run_concept_study(model, concepts, ConceptStudyConfig)` -> `ConceptStudy`: concept difference vectors of any
  `ConceptData` (e.g. `toy_concept_data`): axis, plane, cylinder score per concept and layer; at one steering layer
  the penalty heatmaps (strength × p), sector maps, the Implication-3 pairwise test, the Implication-2 scan and the
  baselines (diffmean, PCA sign-fixed, logistic probe) vs strength. Judge: the concept's token set (+ gibberish
  filter)."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from interplab.core.errors import InputError
from interplab.core.nan import finite_max
from interplab.core.result import Result
from interplab.probes.crh.baselines import (BaselineCurves, baseline_scan, diffmean_direction, pca_direction,
                                            probe_direction)
from interplab.probes.crh.cylinder import (Cylinder, angle_between, fit_cylinder, max_principal_angle,
                                           procrustes_2d, wrap_angle)
from interplab.probes.crh.diffs import concept_diffs_by_layer
from interplab.probes.crh.helix import HelixFit, fit_helix, planted_helix, planted_line
from interplab.probes.crh.implications import (PairwiseTest, TrigLawScan, pairwise_test, steerability_slope,
                                               trig_law_scan)
from interplab.probes.crh.judges import TokenSetJudge
from interplab.probes.crh.sectors import (PenaltyMap, SectorMap, activation_margin, penalty_grid, sector_vectors,
                                          strength_grid)
from interplab.probes.crh.steering import penalty_scan, reply_nll, sector_scan, steer_generate
from interplab.probes.crh.synthetic import planted_cylinder, synthetic_penalty_map, synthetic_sector_map
from interplab.probes.crh.toy import ConceptData

#: the spec's recovery thresholds (max over seeds must stay below)
RECOVERY_THRESHOLDS = {"axis_deg": 6, "plane_deg": 6, "radius_rel_err": 0.10, "azimuth_deg": 8, "centre_deg": 15}


# ------------------------------------------------------------------------------------------------ synthetic
@dataclass
class SyntheticStudyConfig:
    """n_seeds: planted cylinders to draw (one per seed); d, n_train: generator dimension and train size;
    gamma_deg, n_bins, n_strengths: sector-scan protocol (L ∈ (0, 6]); impl3_concepts, impl3_test: size of the
    Implication-3 replica (concepts × test samples each); n_perm: permutations; seed: base seed."""

    n_seeds: int = 20
    d: int = 64
    n_train: int = 200
    gamma_deg: float = 45.0
    n_bins: int = 24
    n_strengths: int = 25
    impl3_concepts: int = 12
    impl3_test: int = 50
    n_perm: int = 500
    seed: int = 0


@dataclass
class SyntheticStudy(Result):
    """Result of `synthetic_study`.

    recovery: one row per seed (angles in degrees, radius error, EVs and cylinder scores of the fit and its LRH null);
    impl3_*: the Implication-3 replica with independent / tied hidden sectors; penalty_tied_*: oracle penalty maps
    with the own normal direction facilitating / suppressing; helix_*: helix fits of planted trajectories (n = 0.7,
    1.0, the LRH line, the faithful mode at n = 1.0); example_*: the first seed's cylinder, sector map and one test
    diff vector (for the figures)."""

    recovery: pd.DataFrame
    impl3_independent: PairwiseTest
    impl3_tied: PairwiseTest
    penalty_tied_facilitating: PenaltyMap
    penalty_tied_suppressing: PenaltyMap
    helix_n0_7: HelixFit
    helix_n1_0: HelixFit
    helix_line: HelixFit
    helix_faithful_n1_0: HelixFit
    example_cylinder: Cylinder
    example_sector_map: SectorMap
    example_sample_diff: np.ndarray
    config: SyntheticStudyConfig = field(default_factory=SyntheticStudyConfig)

    @property
    def impl3(self) -> dict[str, PairwiseTest]:
        return {"independent": self.impl3_independent, "tied": self.impl3_tied}

    @property
    def penalty(self) -> dict[str, PenaltyMap]:
        return {"tied_facilitating": self.penalty_tied_facilitating, "tied_suppressing": self.penalty_tied_suppressing}

    @property
    def helix(self) -> dict[str, HelixFit]:
        return {"helix_n0.7": self.helix_n0_7, "helix_n1.0": self.helix_n1_0, "line": self.helix_line,
                "faithful_n1.0": self.helix_faithful_n1_0}

    def summary(self) -> dict:
        """Max / median recovery errors, pass flags against `RECOVERY_THRESHOLDS`, Implication-3 r and p, helix fits
        and the penalty maps' label-2 rate at L_max per p."""
        rec = self.recovery
        out = {
            "n_seeds": self.config.n_seeds,
            "max": {k: float(rec[k].max()) for k in ("axis_deg", "plane_deg", "radius_rel_err", "azimuth_deg",
                                                     "centre_deg")},
            "median": {k: float(rec[k].median()) for k in ("axis_deg", "plane_deg", "radius_rel_err", "azimuth_deg",
                                                           "centre_deg", "plane_explained", "null_plane_explained",
                                                           "cylinder_score", "null_cylinder_score")},
            "min_facilitate_suppress_sep_deg": float(rec["facilitate_suppress_sep_deg"].min()),
            "impl3": {k: {"r": v.r, "p_perm": v.p_perm, "n_pairs": int(v.x.size)} for k, v in self.impl3.items()},
            "helix": {k: v.summary() for k, v in self.helix.items()},
            "penalty_label2_rate_at_Lmax": {k: ((v.labels == 2).mean(0)[:, -1]).tolist()
                                            for k, v in self.penalty.items()},
        }
        out["pass"] = {k: bool(out["max"][k] < t) for k, t in RECOVERY_THRESHOLDS.items()}
        return out


def _recovery_row(cfg: SyntheticStudyConfig, s: int, L: np.ndarray):
    """One seed's recovery errors (and its fitted cylinder, sector map and organism)."""
    org = planted_cylinder(seed=s, d=cfg.d, n_train=cfg.n_train)
    cyl = fit_cylinder(org.train, seed=s)
    null = fit_cylinder(planted_cylinder(seed=s, d=cfg.d, n_train=cfg.n_train, lrh_null=True).train, seed=s)
    ref = np.stack([org.train @ org.e1, org.train @ org.e2], 1)
    xy = cyl.xy @ procrustes_2d(cyl.xy, ref)
    az = np.degrees(np.abs(wrap_angle(np.arctan2(xy[:, 1], xy[:, 0]) - org.phi_train)))
    sm, _ = synthetic_sector_map(org, cyl, gamma_deg=cfg.gamma_deg, n_bins=cfg.n_bins, strengths=L)
    c = org.to_planted_angle(sm.centre, cyl.plane)
    sup = org.to_planted_angle(sm.suppress, cyl.plane)
    row = {
        "seed": s, "axis_deg": angle_between(cyl.axis, org.u), "plane_deg": max_principal_angle(cyl.plane, org.plane),
        "radius": cyl.radius, "radius_rel_err": abs(cyl.radius / org.expected_radius - 1),
        "azimuth_deg": float(np.median(az)), "centre_deg": abs(math.degrees(wrap_angle(c - org.psi0))),
        "facilitate_suppress_sep_deg": abs(math.degrees(wrap_angle(c - sup))),
        "plane_explained": cyl.plane_explained, "null_plane_explained": null.plane_explained,
        "cylinder_score": cyl.cylinder_score, "null_cylinder_score": null.cylinder_score,
    }
    return row, org, cyl, sm


def _impl3_replica(cfg: SyntheticStudyConfig, sector: str, L: np.ndarray) -> PairwiseTest:
    """Implication 3 on `impl3_concepts` planted concepts steered along one fixed tilted direction each."""
    D, M, G = [], [], []
    for c in range(cfg.impl3_concepts):
        org = planted_cylinder(seed=cfg.seed * 1000 + c, n_test=cfg.impl3_test, sector=sector, d=cfg.d,
                               n_train=cfg.n_train)
        cyl = fit_cylinder(org.train, seed=c, n_null=2)
        v = sector_vectors(cyl, gamma_deg=cfg.gamma_deg, n_bins=cfg.n_bins, strengths=L)[:, 0]
        lab = org.judge(np.broadcast_to(v[:, None, :], (L.size, cfg.impl3_test, cfg.d)))
        M.append(activation_margin(lab.T, L))
        D.append(org.test)
        G.append(np.full(cfg.impl3_test, c))
    return pairwise_test(np.concatenate(D), np.concatenate(M), groups=np.concatenate(G), n_perm=cfg.n_perm,
                         seed=cfg.seed)


def synthetic_study(cfg: SyntheticStudyConfig | None = None) -> SyntheticStudy:
    """Run the synthetic checks (see the module docstring)."""
    cfg = cfg or SyntheticStudyConfig()
    L = np.linspace(6.0 / cfg.n_strengths, 6.0, cfg.n_strengths)
    rows = []
    example = None
    for i in range(cfg.n_seeds):
        row, org, cyl, sm = _recovery_row(cfg, cfg.seed + i, L)
        rows.append(row)
        if i == 0:
            example = (org.test[0], cyl, sm)
    impl3 = {k: _impl3_replica(cfg, k, L) for k in ("independent", "tied")}
    pen = {}
    for name, off in (("tied_facilitating", 0.0), ("tied_suppressing", 180.0)):
        org = planted_cylinder(seed=cfg.seed, sector="tied", tie_offset_deg=off, n_test=40, d=cfg.d,
                               n_train=cfg.n_train)
        pen[name] = synthetic_penalty_map(org, strengths=L)
    helix = {n: fit_helix(planted_helix(30, n, seed=cfg.seed)) for n in (0.7, 1.0)}
    return SyntheticStudy(
        recovery=pd.DataFrame(rows), impl3_independent=impl3["independent"], impl3_tied=impl3["tied"],
        penalty_tied_facilitating=pen["tied_facilitating"], penalty_tied_suppressing=pen["tied_suppressing"],
        helix_n0_7=helix[0.7], helix_n1_0=helix[1.0], helix_line=fit_helix(planted_line(30, seed=cfg.seed)),
        helix_faithful_n1_0=fit_helix(planted_helix(30, 1.0, seed=cfg.seed), mode="faithful"),
        example_sample_diff=example[0], example_cylinder=example[1], example_sector_map=example[2], config=cfg)


# ------------------------------------------------------------------------------------------------ model concepts
@dataclass
class ConceptStudyConfig:
    """layers: layers for the cylinder statistics (empty = all); steer_layer: layer of the steering experiments
    (-1 = ⌊n_layers/2⌋); n_p, n_strengths: penalty grid sizes (p = linspace(0, 1, n_p); L_k = k·L_max/n_strengths);
    penalty_lmax: L_max / ‖a‖ for penalty and sector scans (repo: 3); baseline_lmax: for baselines (repo: 5);
    n_bins, gamma_deg: sector scan; max_new_tokens: generation length; max_rows: rows per generate call;
    n_perm: Implication-3 permutations; steer: run the steering parts (false = geometry only); seed.
    position: where a pair text's activation is read, 'last' (its last real token, the paper) or 'mean' (the mean
    over its real tokens; on a real chat model the last token is the end of the turn, whose difference does not
    steer, docs/crh.md "On a real model"); strength_unit: what penalty_lmax / baseline_lmax multiply, 'axis' (the
    diffmean norm ‖a‖, the repo) or 'resid' (the median residual norm at the steering site on the test prompts'
    last token, a unit that fits a real model's residual scale whatever the read position); fluency: score every
    steered and unsteered reply's mean token NLL on its own under the unsteered model (`reply_nll`)."""

    layers: list[int] = field(default_factory=list)
    steer_layer: int = -1
    n_p: int = 6
    n_strengths: int = 10
    penalty_lmax: float = 3.0
    baseline_lmax: float = 5.0
    n_bins: int = 12
    gamma_deg: float = 45.0
    max_new_tokens: int = 12
    max_rows: int = 512
    n_perm: int = 1000
    steer: bool = True
    seed: int = 0
    position: str = "last"
    strength_unit: str = "axis"
    fluency: bool = False

    def validate(self) -> "ConceptStudyConfig":
        """Typed errors for settings that cannot run."""
        from interplab.core.errors import ConfigError

        if self.position not in ("last", "mean"):
            raise ConfigError(f"position must be 'last' (the paper) or 'mean', got {self.position!r}")
        if self.strength_unit not in ("axis", "resid"):
            raise ConfigError(f"strength_unit must be 'axis' (‖a‖, the repo) or 'resid', got {self.strength_unit!r}")
        for k in ("n_p", "n_strengths", "max_new_tokens", "max_rows"):
            if int(getattr(self, k)) < 1:
                raise ConfigError(f"{k} must be >= 1, got {getattr(self, k)}")
        if int(self.n_bins) < 3:     # checked here so a bad value fails before the cylinders are read
            raise ConfigError(f"n_bins must be >= 3 (sectors around the plane), got {self.n_bins}")
        return self


@dataclass
class ConceptSteering(Result):
    """One concept at the steering layer: its cylinder (train diffs), the test diffs of the steered
    samples, and (when steering ran) the penalty map, sector map and baseline curves, the unit the
    strengths are multiples of, the unsteered replies (the judge's null) and, with `fluency`, every
    reply's NLL on its own under the unsteered model (`reply_nll`; keys 'null' [n_test], 'penalty'
    [n_test, n_p, K], 'sector' [n_test, n_bins, K], 'baselines' [M, n_test, K]). judge_words /
    build_words: the judge's token set and the words the with-concept texts were built from (empty:
    the same as the judge's, or unknown); control: the pseudo-concept whose diffmean steered this
    concept's prompts as the baselines' `control` method at the same norms ('' = none)."""

    cylinder: Cylinder
    test_diffs: np.ndarray
    penalty: PenaltyMap | None = None
    sector: SectorMap | None = None
    baselines: BaselineCurves | None = None
    unit: float = float("nan")
    null_labels: np.ndarray | None = None
    null_texts: list | None = None
    nll: dict | None = None
    judge_words: tuple = ()
    build_words: tuple = ()
    control: str = ""


@dataclass
class ConceptStudy(Result):
    """Result of `run_concept_study`.

    stats: one row per (concept, layer) with the cylinder summary and the test diffs' mean cos θ;
    steer_layer; concepts: name -> `ConceptSteering`, in study order; pooled_penalty /
    pooled_sector: all concepts' maps pooled on the step axis (strengths differ per concept by ‖a‖;
    the repo pools by step too); margins: the Implication-3 M_i of every steered sample; pairwise:
    the Implication-3 test (None when too few samples activate); trig_concept / trig_sample: the
    Implication-2 scan with concept- / sample-level steerability (None when not computable);
    control_stats: the cylinder summary of each concept's paired pseudo-concept (`control`, its
    train pairs) per layer, the geometry's empirical null (None without control pairs); position:
    where the pair texts were read ('last' | 'mean')."""

    stats: pd.DataFrame
    steer_layer: int
    concepts: dict[str, ConceptSteering]
    pooled_penalty: PenaltyMap | None = None
    pooled_sector: SectorMap | None = None
    margins: np.ndarray | None = None
    pairwise: PairwiseTest | None = None
    trig_concept: TrigLawScan | None = None
    trig_sample: TrigLawScan | None = None
    control_stats: pd.DataFrame | None = None
    position: str = ""

    @property
    def steered(self) -> bool:
        return self.pooled_penalty is not None

    @property
    def trig(self) -> dict[str, TrigLawScan | None]:
        return {"concept": self.trig_concept, "sample": self.trig_sample}

    def pooled_baselines(self) -> BaselineCurves:
        """All concepts' baseline curves pooled on the step axis (samples concatenated)."""
        bl = [c.baselines for c in self.concepts.values()]
        return BaselineCurves(methods=bl[0].methods, labels=np.concatenate([b.labels for b in bl], 1),
                              strengths=np.arange(1.0, bl[0].labels.shape[-1] + 1), directions=bl[0].directions)

    def summary(self) -> dict:
        """Cylinder statistics by layer; with steering, the pooled rates and the implication tests."""
        out = {"cylinder": self.stats.groupby("layer")[["plane_explained", "null_plane_explained", "cylinder_score",
                                                        "mean_cos_theta"]].mean().to_dict()}
        if not self.steered:
            return out
        pp, pb = self.pooled_penalty, self.pooled_baselines()
        r2, r3 = pp.rates(2), pp.rates(3)
        m2, _ = pb.rates(2)
        out.update({
            "penalty_max_label2_rate": finite_max(r2), "penalty_max_label3_rate": finite_max(r3),
            "penalty_label2_rate_by_p_at_top_step": dict(zip([f"{p:.2f}" for p in pp.ps], r2[-1].tolist())),
            "sector_label2_rate": float((self.pooled_sector.labels == 2).mean()),
            "sector_auc_range_per_concept": {n: [float(c.sector.population_auc.min()),
                                                 float(c.sector.population_auc.max())]
                                             for n, c in self.concepts.items()},
            "baseline_label2_rate_at_top_step": dict(zip(pb.methods, m2[:, -1].tolist())),
            "n_activated_samples": int((self.margins != 0).sum()), "n_samples": int(self.margins.size),
        })
        for level, tr in self.trig.items():
            out[f"impl2_{level}"] = None if tr is None else {
                "max_r": tr.global_r, "a": tr.global_a, "p": tr.global_p, "perm_p": tr.perm_p, "n_used": tr.n_used,
                "n_negative_cos": tr.n_negative_cos}
        pt = self.pairwise
        out["impl3"] = None if pt is None else {"r": pt.r, "p_perm": pt.p_perm, "n_pairs": int(pt.x.size)}
        return out


def _cylinders(model, concepts: Sequence[ConceptData], layers: list[int], steer_layer: int, seed: int,
               position: str = "last"):
    """Cylinder statistics per (concept, layer) and of each concept's control pairs; the steering
    layer's cylinder, test diffs, train activations and control train diffs (None without control
    pairs)."""
    stats, ctl, at_steer = [], [], {}
    for c in concepts:
        train = concept_diffs_by_layer(model, c.train_pairs, layers=sorted(layers), position=position)
        test = concept_diffs_by_layer(model, c.test_pairs, layers=sorted(layers), position=position)
        control = None if not c.control_pairs else \
            concept_diffs_by_layer(model, c.control_pairs, layers=sorted(layers), position=position)
        for L in sorted(layers):
            d, a_no, a_yes = train[L]
            cyl = fit_cylinder(d, seed=seed, meta={"concept": c.name, "layer": L, "site": f"resid_post.{L}"})
            dt = test[L][0]
            cos_t = dt @ cyl.axis / np.linalg.norm(dt, axis=1)
            stats.append({"concept": c.name, "layer": L, **cyl.summary(), "test_mean_cos_theta": float(cos_t.mean())})
            if control is not None:
                ctl.append({"concept": c.name, "control": c.control_name, "layer": L,
                            **fit_cylinder(control[L][0], seed=seed).summary()})
            if L == steer_layer:
                at_steer[c.name] = (cyl, dt, (a_no, a_yes, d),
                                    None if control is None else control[L][0])
    return pd.DataFrame(stats), (pd.DataFrame(ctl) if ctl else None), at_steer


def _steer_concept(model, c: ConceptData, cyl: Cylinder, dt: np.ndarray, acts,
                   cfg: ConceptStudyConfig, layer: int, ps: np.ndarray,
                   control_diffs: np.ndarray | None = None) -> ConceptSteering:
    """Penalty scan, sector scan and baselines of one concept at the steering layer, and its
    unsteered replies. With `control_diffs` (a pseudo-concept's train diffs) the baselines get a
    `control` method: its diffmean direction at the same strengths, i.e. the concept's diffmean
    vector's norm, judged for this concept."""
    judge = TokenSetJudge(c.words)
    unit = cyl.axis_norm if cfg.strength_unit == "axis" else residual_unit(model, c.test_prompts, layer)
    Lp = strength_grid(cfg.penalty_lmax * unit, cfg.n_strengths)
    gen = {"max_new_tokens": cfg.max_new_tokens, "max_rows": cfg.max_rows}
    null = steer_generate(model, c.test_prompts, np.zeros((len(c.test_prompts), model.d_model)),
                          site=f"resid_post.{layer}", **gen).texts
    pm = penalty_scan(model, c.test_prompts, dt, cyl.axis, layer=layer, judge=judge, strengths=Lp, ps=ps,
                      keep_texts=True, **gen)
    sm = sector_scan(model, c.test_prompts, cyl, layer=layer, judge=judge, gamma=cfg.gamma_deg, n_bins=cfg.n_bins,
                     strengths=Lp, **gen)
    a_no, a_yes, d_tr = acts
    dirs = {"diffmean": diffmean_direction(d_tr), "pca": pca_direction(d_tr),
            "probe": probe_direction(a_no, a_yes, seed=cfg.seed)}
    if control_diffs is not None:
        dirs["control"] = diffmean_direction(control_diffs)
    Lb = strength_grid(cfg.baseline_lmax * unit, cfg.n_strengths)
    bc = baseline_scan(model, c.test_prompts, dirs, layer=layer, judge=judge, strengths=Lb, keep_texts=True, **gen)
    nll = None
    if cfg.fluency:
        nll = {"null": reply_nll(model, null), "penalty": reply_nll(model, pm.texts).reshape(pm.labels.shape),
               "sector": reply_nll(model, sm.texts).reshape(sm.labels.shape),
               "baselines": reply_nll(model, bc.texts).reshape(bc.labels.shape)}
    return ConceptSteering(cylinder=cyl, test_diffs=dt, penalty=pm, sector=sm, baselines=bc,
                           unit=float(unit), null_labels=judge(null), null_texts=null, nll=nll,
                           judge_words=tuple(c.words), build_words=tuple(c.build_words),
                           control=c.control_name if c.control_pairs else "")


def residual_unit(model, prompts, layer: int) -> float:
    """The median residual norm at `resid_post.layer` on the prompts' last token: a steering unit on the model's
    own scale (`strength_unit='resid'`)."""
    from interplab.probes.crh.diffs import concept_acts

    return float(np.median(np.linalg.norm(concept_acts(model, prompts, layer=layer, position="last"), axis=1)))


def _implication_tests(study: ConceptStudy, cfg: ConceptStudyConfig, log) -> None:
    """Pool the concepts' maps; Implication 3 (pairwise) and Implication 2 (trig law, concept and sample level)."""
    names = list(study.concepts)
    steer = [study.concepts[n] for n in names]
    steps = np.arange(1, cfg.n_strengths + 1, dtype=np.float64)
    study.pooled_penalty = PenaltyMap(labels=np.concatenate([s.penalty.labels for s in steer]), ps=steer[0].penalty.ps,
                                      strengths=steps, cos_theta=np.concatenate([s.penalty.cos_theta for s in steer]),
                                      config={"pooled_over": names, "strengths": "step index"})
    study.pooled_sector = SectorMap(labels=np.concatenate([s.sector.labels for s in steer]), strengths=steps,
                                    bin_angles=steer[0].sector.bin_angles, gamma_deg=cfg.gamma_deg,
                                    config={"pooled_over": names, "note": "bins of different concepts live in "
                                                                          "different planes; the pooled map is a "
                                                                          "summary only"})
    study.margins = np.concatenate([s.penalty.margins(0) for s in steer])
    groups = np.concatenate([[gi] * s.test_diffs.shape[0] for gi, s in enumerate(steer)]).astype(int)
    try:
        study.pairwise = pairwise_test(np.concatenate([s.test_diffs for s in steer]), study.margins, groups=groups,
                                       n_perm=cfg.n_perm, seed=cfg.seed)
    except Exception as e:  # noqa: BLE001 - too few activated samples is a result, not a crash
        log(f"[crh] Implication-3 test not computable: {e}")
    cos = np.concatenate([s.penalty.cos_theta for s in steer])
    n = [s.test_diffs.shape[0] for s in steer]
    S = {"concept": np.concatenate([np.full(k, steerability_slope(s.penalty.labels[:, 0, :]))
                                    for k, s in zip(n, steer)]),
         "sample": np.concatenate([steerability_slope(s.penalty.labels[:, 0, None, :]) for s in steer])}
    anorm = np.concatenate([np.full(k, s.cylinder.axis_norm) for k, s in zip(n, steer)])
    for level in ("concept", "sample"):
        try:
            # concept-level S is one value per concept: its permutation null shuffles concepts, not
            # samples
            setattr(study, f"trig_{level}",
                    trig_law_scan(np.sqrt(np.clip(1 - cos**2, 0, 1)), cos, S[level], anorm,
                                  n_perm=100, seed=cfg.seed,
                                  groups=groups if level == "concept" else None))
        except Exception as e:  # noqa: BLE001 - constant steerability (e.g. nothing activates) is a result
            log(f"[crh] Implication-2 scan ({level}) not computable: {e}")


def run_concept_study(model, concepts: Sequence[ConceptData], cfg: ConceptStudyConfig | None = None, *,
                      log=print) -> ConceptStudy:
    """The CRH study on a model (see the module docstring)."""
    cfg = (cfg or ConceptStudyConfig()).validate()
    if not concepts:
        raise InputError("run_concept_study needs at least one concept")
    layers = [int(x) for x in cfg.layers] or list(range(model.n_layers))
    steer_layer = model.n_layers // 2 if cfg.steer_layer < 0 else int(cfg.steer_layer)
    if steer_layer not in layers:
        layers.append(steer_layer)
    t0 = time.perf_counter()
    stats, ctl, at_steer = _cylinders(model, concepts, layers, steer_layer, cfg.seed, cfg.position)
    log(f"[crh] cylinders for {len(concepts)} concepts × {len(layers)} layers in {time.perf_counter() - t0:.1f}s")
    if not cfg.steer:
        return ConceptStudy(stats=stats, steer_layer=steer_layer, control_stats=ctl,
                            position=cfg.position,
                            concepts={n: ConceptSteering(cylinder=cyl, test_diffs=dt)
                                      for n, (cyl, dt, _, _) in at_steer.items()})
    ps = penalty_grid(cfg.n_p)
    per = {}
    for c in concepts:
        t = time.perf_counter()
        cyl, dt, acts, ctl_d = at_steer[c.name]
        per[c.name] = cs = _steer_concept(model, c, cyl, dt, acts, cfg, steer_layer, ps, ctl_d)
        log(f"[crh] {c.name}: penalty/sector/baselines in {time.perf_counter() - t:.1f}s; "
            f"label-2 rate penalty {float((cs.penalty.labels == 2).mean()):.3f}, "
            f"sector {float((cs.sector.labels == 2).mean()):.3f}")
    study = ConceptStudy(stats=stats, steer_layer=steer_layer, concepts=per, control_stats=ctl,
                         position=cfg.position)
    _implication_tests(study, cfg, log)
    return study


