"""Validation experiments (issue 16): each method run unchanged on an organism with a planted mechanism, recovery
scored against the planted truth, with negative controls in the same run.

    interplab run validate-truth-scores                 # 3 seeds, 200 shuffled maps each (minutes on 2 cores)
    interplab run validate-truth-scores --set seeds=[0] --set n_maps=20
    interplab run validate-crh                          # 3 seeds, planted + sector-blind organisms (~4 min)
"""
from __future__ import annotations

from dataclasses import dataclass, field

from interplab.experiments.registry import register_experiment
from interplab.figures import truth_scores as F
from interplab.figures.export import save_figure


@dataclass
class ValidateTruthScoresConfig:
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2],
                             metadata={"help": "probe data, descendant perturbation, conflict prompts, shuffles"})
    n_samples: int = field(default=292, metadata={"help": "verification prompts per Truth-Score map"})
    perturb_scale: float = field(default=0.05, metadata={"help": "descendant: W + scale*rms(W)*N(0,1)"})
    alphas: list[float] = field(default_factory=lambda: [0.25, 0.5, 1.0],
                                metadata={"help": "normalize-gate alphas searched (tuned on a held-out split)"})
    n_maps: int = field(default=200, metadata={"help": "within-layer shuffled maps in the gating null"})
    n_tune: int = field(default=64, metadata={"help": "conflict prompts of the alpha-tuning split"})
    n_eval: int = field(default=64, metadata={"help": "conflict prompts of the evaluation split"})
    n_permutations: int = field(default=1000, metadata={"help": "lineage within-layer permutation null size"})
    backend: str = "bridge"
    workers: int = field(default=3, metadata={"help": "processes running the seeds in parallel (1 = in process)"})
    figure_formats: list[str] = field(default_factory=lambda: ["html"])


@register_experiment("validate-truth-scores", config=ValidateTruthScoresConfig,
                     help="Truth Scores on an organism with planted evidence heads (by construction): recovery, "
                          "lineage and gating vs shuffled-label and other-heads controls")
def validate_truth_scores_experiment(cfg: ValidateTruthScoresConfig, run) -> None:
    from interplab.probes.truth.validation import validate_truth_scores

    res = validate_truth_scores(seeds=cfg.seeds, n_samples=cfg.n_samples, perturb_scale=cfg.perturb_scale,
                                alphas=cfg.alphas, n_maps=cfg.n_maps, n_tune=cfg.n_tune, n_eval=cfg.n_eval,
                                n_permutations=cfg.n_permutations, workdir=run.path / "organisms",
                                backend=cfg.backend, workers=cfg.workers)
    run.save_result("validation", res)
    run.save_table("recovery", res.recovery_table())
    run.save_table("per_seed", res.per_seed)
    run.save_json("summary", res.summary())
    fmts = cfg.figure_formats
    save_figure(run, "recovery_base", F.planted_recovery_bars(res.base, res.planted_heads,
                                                              title="Planted organism: Truth Scores"), fmts)
    save_figure(run, "recovery_shuffled", F.planted_recovery_bars(
        res.shuffled, res.planted_heads, title="Negative control: shuffled labels"), fmts)
    save_figure(run, "recovery_other", F.planted_recovery_bars(
        res.other, res.planted_heads, title="Negative control: organism with other designated heads"), fmts)
    row = res.per_seed.iloc[0]
    save_figure(run, "scatter_descendant", F.pair_scatter(res.base, res.descendant, name_a="planted",
                                                          name_b="descendant"), fmts)
    save_figure(run, "lineage_null", F.null_histogram(res.lineage_null, row["r_descendant"], row["p_descendant"]),
                fmts)
    save_figure(run, "gating_null", F.null_histogram(
        res.gating_null, row["ctx_gated"], row["gating_p"],
        title=f"Gating: context-following vs {cfg.n_maps} within-layer shuffled maps (max over alphas)",
        statistic="context-following"), fmts)


@dataclass
class ValidateCrhShapesConfig:
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2], metadata={"help": "trajectory noise seeds"})
    K: int = field(default=30, metadata={"help": "trajectory points"})
    d: int = field(default=64, metadata={"help": "ambient dimension"})
    noise: float = field(default=0.02, metadata={"help": "isotropic noise std per coordinate"})
    n_boot: int = field(default=2000, metadata={"help": "bootstrap resamples of points"})


@register_experiment("validate-crh-shapes", config=ValidateCrhShapesConfig,
                     help="CRH helix test: line vs planar arc vs helix chosen on held-out points for planted "
                          "trajectories of each shape (the planar arc must not pass as a helix)")
def validate_crh_shapes_experiment(cfg: ValidateCrhShapesConfig, run) -> None:
    from interplab.probes.crh.shape_selection import validate_shapes

    res = validate_shapes(cfg.seeds, K=cfg.K, d=cfg.d, noise=cfg.noise, n_boot=cfg.n_boot)
    run.save_result("validation", res)              # the typed result; the table and summary are views of it
    run.save_table("shapes", res.table)
    run.save_json("summary", res.summary())


@dataclass
class ValidateDecodeShareConfig:
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2],
                             metadata={"help": "Haar draws and the count-matched subsample"})
    layer: int = field(default=0, metadata={"help": "block whose output is read and edited"})
    rho: float = field(default=0.95, metadata={"help": "pooled-PCA variance kept"})
    tau: float = field(default=1e-3, metadata={"help": "per-task variance share threshold (the paper's literal tau)"})
    alpha: float = field(default=1.0, metadata={"help": "removal strength of the shared subspace"})
    backend: str = "bridge"
    figure_formats: list[str] = field(default_factory=lambda: ["html"])


@register_experiment("validate-decodeshare", config=ValidateDecodeShareConfig,
                     help="DecodeShare on an organism with a planted low-variance shared decode-time subspace (by "
                          "construction): estimator recovery, decode-only removal vs energy/Haar/top-variance "
                          "controls, prefill-estimated negative control, LOTO")
def validate_decodeshare_experiment(cfg: ValidateDecodeShareConfig, run) -> None:
    from interplab.figures.decodeshare import validation_bars
    from interplab.probes.decodeshare.validation import validate_decodeshare

    res = validate_decodeshare(seeds=cfg.seeds, layer=cfg.layer, rho=cfg.rho, tau=cfg.tau, alpha=cfg.alpha,
                               workdir=run.path / "organisms", backend=cfg.backend)
    run.save_result("validation", res)
    run.save_table("recovery", res.recovery_table())
    run.save_table("per_seed", res.per_seed)
    run.save_table("loto", res.loto)
    run.save_json("summary", res.summary())
    save_figure(run, "removal", validation_bars(res.per_seed), cfg.figure_formats)


@dataclass
class ValidateCrhConfig:
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2],
                             metadata={"help": "organism draws (frame, sector centre, samples) and control planes"})
    n_samples: int = field(default=48, metadata={"help": "concept pairs behind the cylinder fit"})
    n_prompts: int = field(default=4, metadata={"help": "prompts steered in each sector scan"})
    n_bins: int = field(default=24, metadata={"help": "sector bins around the fitted plane"})
    n_strengths: int = field(default=25, metadata={"help": "strengths k*3|a|/n, k = 1..n"})
    gamma: float = field(default=45.0, metadata={"help": "tilt of the sector steering vectors from the axis (deg)"})
    n_impl: int = field(default=48, metadata={"help": "samples in the penalty scan behind Implications 1-3"})
    n_p: int = field(default=5, metadata={"help": "penalty values p in [0, 1]"})
    n_perm: int = field(default=1000, metadata={"help": "Implication-3 permutation null size"})
    backend: str = "bridge"
    figure_formats: list[str] = field(default_factory=lambda: ["html"])


@register_experiment("validate-crh", config=ValidateCrhConfig,
                     help="CRH on an organism with a planted cylinder and sector detector (by construction): axis, "
                          "plane, sector centre and sector-map recovery, Implications 1-3, vs a sector-blind "
                          "organism and a rotated-plane control")
def validate_crh_experiment(cfg: ValidateCrhConfig, run) -> None:
    from interplab.figures.crh import validation_sector_maps
    from interplab.probes.crh.validation import validate_crh

    res = validate_crh(seeds=cfg.seeds, n_samples=cfg.n_samples, n_prompts=cfg.n_prompts, n_bins=cfg.n_bins,
                       n_strengths=cfg.n_strengths, gamma=cfg.gamma, n_impl=cfg.n_impl, n_p=cfg.n_p,
                       n_perm=cfg.n_perm, workdir=run.path / "organisms", backend=cfg.backend)
    run.save_result("validation", res)
    run.save_table("recovery", res.recovery_table())
    run.save_table("per_seed", res.per_seed)
    run.save_table("maps", res.maps)
    run.save_json("summary", res.summary())
    save_figure(run, "sector_maps", validation_sector_maps(res.maps), cfg.figure_formats)
