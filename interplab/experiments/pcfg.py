"""PCFG experiments (spec ../shared/methods/pcfg_parse.md §5).

* `pcfg-depth`: KL / TV / excess NLL against the exact grammar for the depth sweep (default zoo:pcfg-L2/L4/L6),
  per position and overall, with unigram/bigram baselines; figures: depth sweep, KL by position.
* `pcfg-probes`: layer-wise parse probes on one organism (default zoo:pcfg-L6) with random-init and
  shuffled-label controls over several split seeds; l*(ℓ) per target and its slope against log2 ℓ.
* `pcfg-attention`: attention mass at relative offset 2^(k-1) per layer and head (construction mirror).
* `pcfg-depth-sweep`: trains organisms of depths 1–8 × 3 training seeds at one step budget, then KL vs depth with t
  intervals over seeds and the l*(ℓ) slope per depth with t intervals over seeds (and probe splits).
* `pcfg-construction`: the rest of the construction mirror (§5.4): per layer, held-out R² of the size-2^k dyadic
  inside vector at aligned block ends, and KL(p_trunc,k ‖ logit lens at layer l) for the k-level truncated predictor.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from interplab.experiments.registry import register_experiment
from interplab.figures.export import save_figure
from interplab.zoo.recipes.pcfg import EVAL_SEED as CARD_EVAL_SEED

from interplab.probes.pcfg.depth_seeds import DepthSeedSweepConfig

__all__ = ["PCFGDepthConfig", "PCFGProbesConfig", "PCFGAttentionConfig", "PCFGConstructionConfig",
           "PCFGDepthSweepConfig", "PCFGVerdictsConfig"]

DEPTH_SWEEP = ["zoo:pcfg-L2", "zoo:pcfg-L4", "zoo:pcfg-L6"]


def _short(name: str) -> str:
    return name.replace("zoo:", "").replace("/", "_")


@dataclass
class PCFGDepthConfig:
    """models: organisms/checkpoints trained on the same grammar; n_sequences: held-out grammar samples; seed:
    sample seed (default: the PCFG recipes' evaluation seed, so that with the default 512 sequences this run
    reproduces the KL on the organisms' model cards exactly — one sample behind both numbers); backend: hook-layer
    backend."""

    models: list[str] = field(default_factory=lambda: list(DEPTH_SWEEP))
    n_sequences: int = 512
    seed: int = CARD_EVAL_SEED
    backend: str = "bridge"


@register_experiment("pcfg-depth", config=PCFGDepthConfig,
                     help="KL vs the exact grammar distribution for PCFG organisms of several depths")
def pcfg_depth(cfg: PCFGDepthConfig, run) -> None:
    import interplab
    from interplab.figures.pcfg import depth_sweep_figure, kl_by_position_figure
    from interplab.probes.pcfg import depth_sweep
    from interplab.zoo.recipes.pcfg import grammar_of

    models = [interplab.load_model(n, backend=cfg.backend) for n in cfg.models]
    g = grammar_of(models[0])
    res = depth_sweep(models, cfg.models, g, cfg.n_sequences, cfg.seed)
    run.save_result("depth", res)                  # the typed result; the tables below are views of it
    frames = res.frames()
    run.save_table("depth_summary", res.summary)
    for n, df in frames.items():
        run.save_table("kl_by_position_" + _short(n), df)
    save_figure(run, "depth_sweep", depth_sweep_figure(res.summary, log2_n=res.log2_n))
    save_figure(run, "kl_by_position", kl_by_position_figure(frames))
    run.save_json("summary", res.headline())


@dataclass
class PCFGProbesConfig:
    """model: organism; targets: probe targets (see interplab.probes.pcfg.PROBE_TARGETS); probe: linear | mlp;
    n_sequences: held-out samples; n_seeds: split seeds (std over them); seed: base seed; cap_per_bucket: max
    examples per (target, span bucket); max_len: longest sampled string (0 = what the model's context allows; longer
    samples are truncated to exact prefixes); backend: hook-layer backend."""

    model: str = "zoo:pcfg-L6"
    targets: list[str] = field(default_factory=lambda: ["span_posterior", "inside", "gold_label", "pending",
                                                        "next_token", "marginal"])
    probe: str = "linear"
    n_sequences: int = 400
    n_seeds: int = 3
    seed: int = 0
    cap_per_bucket: int = 3000
    max_len: int = 0
    backend: str = "bridge"


@register_experiment("pcfg-probes", config=PCFGProbesConfig,
                     help="layer-wise parse probes (span posteriors, inside, gold labels, pending demand) and l*(ℓ)")
def pcfg_probes(cfg: PCFGProbesConfig, run) -> None:
    import interplab
    from interplab.figures.pcfg import local_to_global_heatmap, lstar_figure, probe_curves_figure
    from interplab.probes.pcfg import probe_study
    from interplab.zoo.recipes.pcfg import grammar_of

    m = interplab.load_model(cfg.model, backend=cfg.backend)
    res = probe_study(m, grammar_of(m), cfg.targets, cfg.probe, cfg.n_sequences, cfg.n_seeds, cfg.seed,
                      cfg.cap_per_bucket, cfg.max_len)
    df = res.probes
    run.save_result("study", res)                  # the typed result; the tables below are views of it
    run.save_table("probes", df)
    run.save_table("l_star", res.l_star)
    run.save_json("slopes", res.slopes)
    for t in df["target"].unique():
        save_figure(run, f"probe_curves_{t}", probe_curves_figure(df, t))
        if (df[df.target == t]["bucket"] != "all").any():
            save_figure(run, f"local_to_global_{t}", local_to_global_heatmap(df, t))
    save_figure(run, "l_star", lstar_figure(res.l_star, slopes=res.slopes))


@dataclass
class PCFGOrganisms:
    """Settings the experiments over several PCFG organisms share. models: organisms (trained on a uniform-binary
    grammar); n_sequences: held-out samples; seed: sample seed; backend."""

    models: list[str] = field(default_factory=lambda: list(DEPTH_SWEEP))
    n_sequences: int = 128
    seed: int = 0
    backend: str = "bridge"


@dataclass
class PCFGAttentionConfig(PCFGOrganisms):
    """Fields: `PCFGOrganisms`."""


@register_experiment("pcfg-attention", config=PCFGAttentionConfig,
                     help="attention mass at relative offset 2^(k-1) per layer and head (construction mirror)")
def pcfg_attention(cfg: PCFGAttentionConfig, run) -> None:
    import interplab
    from interplab.figures.pcfg import attention_offset_figure
    from interplab.probes.pcfg import AttentionOffsets, attention_offset_mass
    from interplab.zoo.recipes.pcfg import grammar_of

    frames = {}
    for name in cfg.models:
        m = interplab.load_model(name, backend=cfg.backend)
        frames[name] = am = attention_offset_mass(m, grammar_of(m), cfg.n_sequences, cfg.seed)
        save_figure(run, "attention_offset_" + name.replace("zoo:", ""), attention_offset_figure(
            am, title=f"{name}: attention at offset 2^(k-1) (max over heads / uniform)"))
    res = AttentionOffsets.stack(frames)
    run.save_result("attention", res)              # the typed result; the table below is a view of it
    run.save_table("attention_offset", res.table)


@dataclass
class PCFGConstructionConfig(PCFGOrganisms):
    """Fields of `PCFGOrganisms` (400 held-out samples by default) and n_seeds: probe split seeds."""

    n_sequences: int = 400
    n_seeds: int = 3


@register_experiment("pcfg-construction", config=PCFGConstructionConfig,
                     help="construction mirror: dyadic inside vectors per layer, KL to the k-level truncated predictor")
def pcfg_construction(cfg: PCFGConstructionConfig, run) -> None:
    import interplab
    from interplab.figures.pcfg import dyadic_probe_figure, truncated_kl_figure
    from interplab.probes.pcfg import construction_mirror
    from interplab.probes.pcfg.verdicts import construction_verdicts
    from interplab.zoo.recipes.pcfg import grammar_of

    probes, kls, summary = [], [], {}
    for name in cfg.models:
        m = interplab.load_model(name, backend=cfg.backend)
        cm = construction_mirror(m, grammar_of(m), cfg.n_sequences, cfg.seed, n_seeds=cfg.n_seeds)
        save_figure(run, "dyadic_probe_" + _short(name),
                    dyadic_probe_figure(cm.probe, title=f"{name}: dyadic inside R² by layer"))
        save_figure(run, "truncated_kl_" + _short(name),
                    truncated_kl_figure(cm.kl, title=f"{name}: KL(p_trunc,k ‖ layer l)"))
        summary[name] = cm.summary()
        run.save_result("construction_" + _short(name), cm)
        probes.append(cm.probe.assign(model=name)[["model", *cm.probe.columns]])
        kls.append(cm.kl.assign(model=name)[["model", *cm.kl.columns]])
    run.save_table("dyadic_probe", pd.concat(probes, ignore_index=True))
    kl_all = pd.concat(kls, ignore_index=True)
    run.save_table("truncated_kl", kl_all)
    run.save_json("summary", summary)
    _save_verdicts(run, construction_verdicts(kl_all))


def _save_verdicts(run, verdicts) -> None:
    """The run's validity report (`interplab.probes.pcfg.verdicts`), when it makes a claim."""
    from interplab.probes.validity import VALIDITY_RESULT, ValidityReport

    if verdicts:
        run.save_result(VALIDITY_RESULT, ValidityReport.of(verdicts))


@dataclass
class PCFGDepthSweepConfig(DepthSeedSweepConfig):
    """Fields of `interplab.probes.pcfg.DepthSeedSweepConfig` (depths, seeds, steps, ..., threads)."""


@register_experiment("pcfg-depth-sweep", config=PCFGDepthSweepConfig,
                     help="train PCFG organisms of depths 1-8 x 3 seeds at an equal step budget; KL vs depth and the "
                          "l*(ℓ) slope per depth with t intervals over training seeds")
def pcfg_depth_sweep(cfg: PCFGDepthSweepConfig, run) -> None:
    from interplab.figures.pcfg import kl_depth_seeds_figure, lstar_depth_seeds_figure
    from interplab.probes.pcfg import depth_seed_sweep
    from interplab.probes.pcfg.verdicts import depth_sweep_verdicts

    cfg.validate()
    # organisms' weights go into the run folder (not committed with the outputs; see results/pcfg-depth-sweep)
    res = depth_seed_sweep(cfg, run.path, progress=print)
    run.save_result("sweep", res)
    run.save_table("organisms", res.organisms)
    run.save_table("kl_by_depth", res.kl_by_depth)
    run.save_table("slope_by_depth", res.slope_by_depth)
    run.save_json("summary", res.headline())
    _save_verdicts(run, depth_sweep_verdicts(res, probe_sequences=cfg.probe_sequences,
                                             n_splits=cfg.n_splits, probe_seed=cfg.probe_seed))
    save_figure(run, "kl_vs_depth", kl_depth_seeds_figure(res.kl_by_depth, res.organisms, log2_n=res.log2_n,
                                                          level=res.level))
    for t in cfg.probe_targets:
        save_figure(run, f"l_star_by_depth_{t}", lstar_depth_seeds_figure(res.l_star, res.slope_by_depth, t))


@dataclass
class PCFGVerdictsConfig:
    """Saved runs to judge ("" = skip): sweep_run, a `pcfg-depth-sweep` run folder (claims 1–3);
    construction_run, a `pcfg-construction` run folder (claim 4, over its organisms: training seeds
    of one grammar)."""

    sweep_run: str = ""
    construction_run: str = ""


@register_experiment("pcfg-verdicts", config=PCFGVerdictsConfig,
                     help="verdicts (with validity checks) of saved pcfg-depth-sweep / "
                          "pcfg-construction runs, from their committed outputs")
def pcfg_verdicts(cfg: PCFGVerdictsConfig, run) -> None:
    """Runs saved before runs checked themselves get their validity report from their committed
    outputs (the `DepthSeedSweep` result and config of a sweep, the `truncated_kl` table of a
    construction run)."""
    from pathlib import Path

    from interplab.core.errors import ConfigError
    from interplab.probes.pcfg.depth_seeds import DepthSeedSweep
    from interplab.probes.pcfg.verdicts import construction_verdicts, depth_sweep_verdicts
    from interplab.results.runs import load_run

    verdicts, sources = [], {}
    if cfg.sweep_run:
        sr = load_run(Path(cfg.sweep_run))
        sweep = DepthSeedSweep.load(sr.path / "sweep")
        c = sr.config
        verdicts += depth_sweep_verdicts(sweep, probe_sequences=int(c["probe_sequences"]),
                                         n_splits=int(c["n_splits"]),
                                         probe_seed=int(c["probe_seed"]))
        sources["sweep_run"] = cfg.sweep_run
    if cfg.construction_run:
        kl = load_run(Path(cfg.construction_run)).table("truncated_kl")
        verdicts += construction_verdicts(kl)
        sources["construction_run"] = cfg.construction_run
    if not verdicts:
        raise ConfigError("nothing to judge: set sweep_run and/or construction_run to saved run "
                          "folders")
    run.save_json("sources", sources)
    _save_verdicts(run, verdicts)

