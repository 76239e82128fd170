"""PCFG experiments (spec ../shared/methods/pcfg_parse.md §5).

* `pcfg-depth`: KL / TV / excess NLL against the exact grammar for the depth sweep (default zoo:pcfg-L2/L4/L6),
  per position and overall, with unigram/bigram baselines; figures: depth sweep, KL by position.
* `pcfg-probes`: layer-wise parse probes on one organism (default zoo:pcfg-L6) with random-init and
  shuffled-label controls over several split seeds; l*(ℓ) per target and its slope against log2 ℓ.
* `pcfg-attention`: attention mass at relative offset 2^(k-1) per layer and head (construction mirror).
* `pcfg-construction`: the rest of the construction mirror (§5.4): per layer, held-out R² of the size-2^k dyadic
  inside vector at aligned block ends, and KL(p_trunc,k ‖ logit lens at layer l) for the k-level truncated predictor.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from interplab.experiments.registry import register_experiment
from interplab.figures.export import save_figure

__all__ = ["PCFGDepthConfig", "PCFGProbesConfig", "PCFGAttentionConfig", "PCFGConstructionConfig", "depth_sweep", "probe_study"]


def _names(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


@dataclass
class PCFGDepthConfig:
    """models: comma-separated organisms/checkpoints trained on the same grammar; n_sequences: held-out grammar
    samples; seed: sample seed; backend: hook-layer backend."""

    models: str = "zoo:pcfg-L2,zoo:pcfg-L4,zoo:pcfg-L6"
    n_sequences: int = 512
    seed: int = 0
    backend: str = "bridge"


def depth_sweep(models: list, names: list[str], g, n_sequences: int = 512, seed: int = 0):
    """-> (summary frame one row per model, {name: per-position frame})."""
    from interplab.probes.pcfg_parse import kl_summary, pcfg_kl

    frames, rows = {}, []
    for m, name in zip(models, names):
        df = pcfg_kl(m, g, n_sequences, seed)
        frames[name] = df
        s = kl_summary(df)
        rows.append({"model": name, "n_layers": m.n_layers, "grammar": g.name, **s})
    return pd.DataFrame(rows), frames


@register_experiment("pcfg-depth", config=PCFGDepthConfig,
                     help="KL vs the exact grammar distribution for PCFG organisms of several depths")
def pcfg_depth(cfg: PCFGDepthConfig, run) -> None:
    import math

    import interplab
    from interplab.figures.pcfg import depth_sweep_figure, kl_by_position_figure
    from interplab.zoo.recipes.pcfg import grammar_of

    names = _names(cfg.models)
    models = [interplab.load_model(n, backend=cfg.backend) for n in names]
    g = grammar_of(models[0])
    summ, frames = depth_sweep(models, names, g, cfg.n_sequences, cfg.seed)
    run.save_table("depth_summary", summ)
    for n, df in frames.items():
        run.save_table("kl_by_position_" + n.replace("zoo:", "").replace("/", "_"), df)
    L = None
    if g.levels.max() > 0 and not g.auxiliary.any():
        L = float(g.levels.max())  # uniform binary: n = 2^L
    save_figure(run, "depth_sweep", depth_sweep_figure(summ, log2_n=L))
    save_figure(run, "kl_by_position", kl_by_position_figure({n: frames[n] for n in names}))
    run.save_json("summary", {"grammar": g.to_dict()["name"], "log2_n": L,
                              "kl": {r["model"]: r["kl"] for r in summ.to_dict("records")},
                              "kl_se": {r["model"]: r["kl_se"] for r in summ.to_dict("records")},
                              "kl_bigram": float(summ["kl_bigram"].iloc[0]),
                              "kl_unigram": float(summ["kl_unigram"].iloc[0]),
                              "entropy_rate": float(summ["entropy_rate"].iloc[0])})


@dataclass
class PCFGProbesConfig:
    """model: organism; targets: comma-separated probe targets (see interplab.probes.pcfg_parse.PROBE_TARGETS);
    probe: linear | mlp; n_sequences: held-out samples; n_seeds: split seeds (std over them); seed: base seed;
    cap_per_bucket: max examples per (target, span bucket); max_len: longest sampled string (0 = what the model's
    context allows; longer samples are truncated to exact prefixes); backend: hook-layer backend."""

    model: str = "zoo:pcfg-L6"
    targets: str = "span_posterior,inside,gold_label,pending,next_token,marginal"
    probe: str = "linear"
    n_sequences: int = 400
    n_seeds: int = 3
    seed: int = 0
    cap_per_bucket: int = 3000
    max_len: int = 0
    backend: str = "bridge"


def probe_study(model, g, targets, probe="linear", n_sequences=400, n_seeds=3, seed=0, cap_per_bucket=3000,
                max_len=None):
    """-> (probe frame, l* frame, {target: slope dict})."""
    from interplab.probes.pcfg_parse import local_to_global, lstar_slope, parse_probes

    df = parse_probes(model, g, targets=targets, probe=probe, seed=seed, n_sequences=n_sequences, n_seeds=n_seeds,
                      cap_per_bucket=cap_per_bucket, max_len=max_len or None)
    ls = local_to_global(df)
    slopes = {t: lstar_slope(ls, t) for t in ls["target"].unique()}
    return df, ls, slopes


@register_experiment("pcfg-probes", config=PCFGProbesConfig,
                     help="layer-wise parse probes (span posteriors, inside, gold labels, pending demand) and l*(ℓ)")
def pcfg_probes(cfg: PCFGProbesConfig, run) -> None:
    import interplab
    from interplab.figures.pcfg import local_to_global_heatmap, lstar_figure, probe_curves_figure
    from interplab.zoo.recipes.pcfg import grammar_of

    m = interplab.load_model(cfg.model, backend=cfg.backend)
    g = grammar_of(m)
    df, ls, slopes = probe_study(m, g, _names(cfg.targets), cfg.probe, cfg.n_sequences, cfg.n_seeds, cfg.seed,
                                 cfg.cap_per_bucket, cfg.max_len)
    run.save_table("probes", df)
    run.save_table("l_star", ls)
    run.save_json("slopes", slopes)
    for t in df["target"].unique():
        save_figure(run, f"probe_curves_{t}", probe_curves_figure(df, t))
        if (df[df.target == t]["bucket"] != "all").any():
            save_figure(run, f"local_to_global_{t}", local_to_global_heatmap(df, t))
    save_figure(run, "l_star", lstar_figure(ls, slopes=slopes))


@dataclass
class PCFGOrganisms:
    """Settings the experiments over several PCFG organisms share. models: comma-separated organisms (trained on a
    uniform-binary grammar); n_sequences: held-out samples; seed: sample seed; backend."""

    models: str = "zoo:pcfg-L2,zoo:pcfg-L4,zoo:pcfg-L6"
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
    from interplab.probes.pcfg_parse import attention_offset_mass
    from interplab.zoo.recipes.pcfg import grammar_of

    out = []
    for name in _names(cfg.models):
        m = interplab.load_model(name, backend=cfg.backend)
        g = grammar_of(m)
        am = attention_offset_mass(m, g, cfg.n_sequences, cfg.seed)
        am.insert(0, "model", name)
        out.append(am)
        save_figure(run, "attention_offset_" + name.replace("zoo:", ""), attention_offset_figure(am.drop(columns="model"),
                        title=f"{name}: attention at offset 2^(k-1) (max over heads / uniform)"))
    run.save_table("attention_offset", pd.concat(out, ignore_index=True))


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
    from interplab.probes.pcfg_construction import construction_mirror
    from interplab.zoo.recipes.pcfg import grammar_of

    probes, kls, summary = [], [], {}
    for name in _names(cfg.models):
        m = interplab.load_model(name, backend=cfg.backend)
        g = grammar_of(m)
        out = construction_mirror(m, g, cfg.n_sequences, cfg.seed, n_seeds=cfg.n_seeds)
        short = name.replace("zoo:", "").replace("/", "_")
        pr, kl = out["probe"], out["kl"]
        save_figure(run, "dyadic_probe_" + short, dyadic_probe_figure(pr, title=f"{name}: dyadic inside R² by layer"))
        save_figure(run, "truncated_kl_" + short, truncated_kl_figure(kl, title=f"{name}: KL(p_trunc,k ‖ layer l)"))
        last = kl[kl["final_layer"]]
        summary[name] = {"log2_n": out["log2_n"],
                         "final_kl_by_k": {int(r.k): float(r.kl_trunc_model) for r in last.itertuples()},
                         "kl_exact_trunc_by_k": {int(r.k): float(r.kl_exact_trunc) for r in last.itertuples()},
                         "best_k_by_layer": {int(l): int(d.loc[d["kl_trunc_model"].idxmin(), "k"])
                                             for l, d in kl.groupby("layer")}}
        pr.insert(0, "model", name)
        kl.insert(0, "model", name)
        probes.append(pr)
        kls.append(kl)
    run.save_table("dyadic_probe", pd.concat(probes, ignore_index=True))
    run.save_table("truncated_kl", pd.concat(kls, ignore_index=True))
    run.save_json("summary", summary)
