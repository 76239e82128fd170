"""Truth-Score experiments (spec truth_scores.md): released-map lineage table, Truth-Score maps of the toy
organisms, inheritance along the toy lineage with weight preservation and evidence attention, and the TruthProbe
gating sweep on CtxMem counterfactual generation.

    interplab run truth-released-lineage
    interplab run truth-scores --set model=zoo:toy-base
    interplab run truth-lineage --set base=zoo:toy-base --set descendant=zoo:toy-chat --set control=zoo:toy-base-s2
    interplab run truth-gating-sweep --set target=zoo:toy-chat --set score_source=zoo:toy-base
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from interplab.experiments.registry import register_experiment
from interplab.figures.export import save_figure


def _formats(s: str) -> tuple[str, ...]:
    return tuple(f.strip() for f in s.split(",") if f.strip())


def _load(name: str, backend: str = "bridge"):
    import interplab

    return interplab.load_model(name, backend=backend, device="cpu")


# --------------------------------------------------------------------------------------------- released maps
@dataclass
class ReleasedLineageConfig:
    directory: str = field(default="", metadata={"help": "folder of converted_score_cv5_head_metrics_*.npy "
                                                          "(default: shared/data/truthprobe_scores)"})
    n_permutations: int = field(default=1000, metadata={"help": "within-layer head-shuffle null size"})
    top_k_frac: float = field(default=0.05, metadata={"help": "top-k fraction for the Jaccard overlap"})
    seed: int = field(default=0, metadata={"help": "permutation seed"})
    figure_formats: str = field(default="html", metadata={"help": "comma list of export formats (empty: json only)"})


SHIPPED_GATES = (  # (map, mode, alpha) shipped in the repo's run scripts (spec §4)
    ("vicuna", "contrast", 4.5), ("llama2", "contrast", 6.0), ("qwen2.5", "contrast", 6.0),
    ("vicuna", "normalize", 0.2), ("llava1.5", "normalize", 0.1), ("qwen2.5", "normalize", 0.3),
    ("qwen2.5_vl_instruct", "normalize", 0.3), ("vicuna", "contrast", 6.0), ("llava1.5", "contrast", 4.5),
)


@register_experiment("truth-released-lineage", config=ReleasedLineageConfig,
                     help="Lineage statistics of the authors' 7 released Truth-Score maps (r(llama2, vicuna) = 0.85)")
def released_lineage(cfg: ReleasedLineageConfig, run) -> None:
    import pandas as pd

    from interplab.figures import truth_scores as F
    from interplab.interventions.head_gate import gate_summary, truth_gates
    from interplab.probes.truth_lineage import (RELEASED_PAIRS, correlation_matrix, lineage_correlation,
                                                lineage_table, load_released_maps, per_layer_correlation)

    maps = load_released_maps(cfg.directory or None)
    fmts = _formats(cfg.figure_formats)
    table = lineage_table(maps, [p for p in RELEASED_PAIRS if p[0] in maps and p[1] in maps],
                          top_k_frac=cfg.top_k_frac, n_permutations=cfg.n_permutations, seed=cfg.seed)
    run.save_table("lineage", table)
    for stat in ("pearson", "spearman", "pearson_centered", "topk_jaccard"):
        m = correlation_matrix(maps, stat, top_k_frac=cfg.top_k_frac)
        run.save_table(f"matrix_{stat}", m.reset_index(names="model"))
        if stat in ("pearson", "pearson_centered"):
            save_figure(run, f"matrix_{stat}", F.lineage_matrix(m, statistic=stat), fmts)
    mi = correlation_matrix(maps, "pearson", align="intersect")
    run.save_table("matrix_pearson_repo_intersect", mi.reset_index(names="model"))
    curves = {f"{a}↔{b}": per_layer_correlation(maps[a], maps[b]) for a, b in RELEASED_PAIRS
              if a in maps and b in maps}
    save_figure(run, "per_layer", F.per_layer_curves(curves), fmts)
    if "llama2" in maps and "vicuna" in maps:
        st = lineage_correlation(maps["llama2"], maps["vicuna"], n_permutations=cfg.n_permutations, seed=cfg.seed,
                                 top_k_frac=cfg.top_k_frac, return_null=True)
        save_figure(run, "scatter_llama2_vicuna", F.pair_scatter(maps["llama2"], maps["vicuna"], name_a="llama2",
                                                                name_b="vicuna", stats=st), fmts)
        save_figure(run, "null_llama2_vicuna", F.null_histogram(st["null"], st["pearson"], st["perm_p"]), fmts)
        run.save_json("summary", {"r_llama2_vicuna": st["pearson"], **{k: v for k, v in st.items() if k != "null"}})
    gates = [{"map": n, "mode": mo, "alpha": a, **gate_summary(truth_gates(maps[n], mo, a))}
             for n, mo, a in SHIPPED_GATES if n in maps]
    run.save_table("shipped_gates", pd.DataFrame(gates))
    if "qwen2.5" in maps:
        save_figure(run, "gates_qwen2.5_contrast6", F.gate_preview(truth_gates(maps["qwen2.5"], "contrast", 6.0)),
                        fmts)


# --------------------------------------------------------------------------------------------- one organism
@dataclass
class ProbeRecipe:
    """The Truth-Score probe recipe shared by the model experiments (fields as in `TruthScoresConfig`)."""

    folds: int = 5
    fold_kind: str = "kfold"
    epochs: int = 200
    lr: float = 1e-2
    weight_decay: float = 1e-3
    seed: int = 42

    def probe_kwargs(self) -> dict:
        return dict(folds=self.folds, fold_kind=self.fold_kind, epochs=self.epochs, lr=self.lr,
                    weight_decay=self.weight_decay, seed=self.seed)


@dataclass
class TruthScoresExpConfig(ProbeRecipe):
    model: str = field(default="zoo:toy-base", metadata={"help": "model to score (zoo name, local dir, hub id)"})
    backend: str = field(default="bridge", metadata={"help": "bridge or nnsight"})
    n_samples: int = field(default=292, metadata={"help": "CtxMem verification prompts (the repo uses 292)"})
    data_seed: int = field(default=0, metadata={"help": "CtxMem sampling seed"})
    fmt: str = field(default="raw", metadata={"help": "prompt format: raw or chat"})
    top_k_frac: float = field(default=0.25, metadata={"help": "head fraction for the top/bottom/random EM groups"})
    ablation: bool = field(default=True, metadata={"help": "zero-ablate each head's z and measure the Mode-V "
                                                           "accuracy drop (one forward set per head)"})
    figure_formats: str = "html"


def score_and_evidence(model, cfg) -> tuple:
    """(TruthScores, evidence mass [L, H], items) of `model` on the CtxMem Truth-Score set."""
    from interplab.probes.truth_data import ctxmem_truth_set
    from interplab.probes.truth_scores import evidence_attention, truth_scores

    items = ctxmem_truth_set(cfg.n_samples, seed=cfg.data_seed, fmt=cfg.fmt, tokenizer=model.tokenizer)
    ts = truth_scores(model, items, **cfg.probe_kwargs())
    ts.provenance.update({"data": f"CtxMem verification, n={cfg.n_samples}, seed={cfg.data_seed}, fmt={cfg.fmt}"})
    em = evidence_attention(model, items)
    return ts, em, items


@register_experiment("truth-scores", config=TruthScoresExpConfig,
                     help="Truth-Score map of one model on CtxMem verification, with evidence attention")
def truth_scores_experiment(cfg: TruthScoresExpConfig, run) -> None:
    from interplab.figures import truth_scores as F
    from interplab.probes.truth_analysis import evidence_summary

    model = _load(cfg.model, cfg.backend)
    ts, em, items = score_and_evidence(model, cfg)
    fmts = _formats(cfg.figure_formats)
    ts.save(run.path / "truth_scores")
    run.save_table("scores", ts.to_frame())
    run.save_arrays("evidence_mass", {"evidence_mass": em, "scores": ts.scores})
    groups, rho = evidence_summary(ts, em, k_frac=cfg.top_k_frac)
    run.save_table("evidence_groups", groups)
    summary = {"model": cfg.model, "mean_S": float(ts.scores.mean()), "max_S": float(ts.scores.max()),
               "top_heads": ts.top_heads(5), "spearman_S_EM": rho, "accuracy_step": ts.accuracy_step,
               "argmax_S": list(np.unravel_index(int(np.argmax(ts.scores)), ts.scores.shape)),
               "argmax_EM": list(np.unravel_index(int(np.argmax(em)), em.shape))}
    if cfg.ablation:
        from interplab.probes.truth_analysis import head_ablation_effects, spearman

        drop, base_acc = head_ablation_effects(model, items)
        run.save_arrays("ablation", {"accuracy_drop": drop})
        summary.update({"verification_accuracy": base_acc,
                        "argmax_ablation_drop": list(np.unravel_index(int(np.argmax(drop)), drop.shape)),
                        "max_ablation_drop": float(drop.max()), "spearman_S_ablation_drop": spearman(ts, drop)})
    run.save_json("summary", summary)
    save_figure(run, "heatmap", F.score_heatmap(ts), fmts)
    save_figure(run, "evidence_scatter", F.evidence_scatter(ts, em, rho=rho), fmts)
    save_figure(run, "evidence_groups", F.evidence_group_bars(groups), fmts)
    save_figure(run, "diagnostics", F.probe_diagnostics(ts), fmts)


# --------------------------------------------------------------------------------------------- toy lineage
@dataclass
class LineageExpConfig(ProbeRecipe):
    base: str = field(default="zoo:toy-base", metadata={"help": "ancestor model"})
    descendant: str = field(default="zoo:toy-chat", metadata={"help": "fine-tuned descendant of base"})
    control: str = field(default="zoo:toy-base-s2", metadata={"help": "same recipe, another seed (no shared "
                                                                      "lineage); empty to skip"})
    backend: str = "bridge"
    n_samples: int = 292
    data_seed: int = 0
    fmt: str = field(default="raw", metadata={"help": "the same prompts for all three models (repo: no template)"})
    n_permutations: int = 1000
    top_k_frac: float = field(default=0.25, metadata={"help": "top-k fraction (toy models have few heads)"})
    figure_formats: str = "html"


@register_experiment("truth-lineage", config=LineageExpConfig,
                     help="Inheritance of Truth-Score maps: r(base, descendant) vs r(base, control), weight "
                          "preservation vs score change, evidence attention vs score")
def lineage_experiment(cfg: LineageExpConfig, run) -> None:
    import pandas as pd

    from interplab.figures import truth_scores as F
    from interplab.probes.truth_analysis import evidence_summary
    from interplab.probes.truth_lineage import lineage_correlation, per_layer_correlation
    from interplab.probes.truth_weights import preservation_vs_score_change, weight_preservation

    fmts = _formats(cfg.figure_formats)
    names = {"base": cfg.base, "descendant": cfg.descendant, "control": cfg.control}
    if not cfg.control:
        names.pop("control")
    models, scores, ems = {}, {}, {}
    ev_rows = []
    for role, name in names.items():
        models[role] = _load(name, cfg.backend)
        ts, em, _ = score_and_evidence(models[role], cfg)
        ts.model = f"{role}:{name}"
        scores[role], ems[role] = ts, em
        ts.save(run.path / f"truth_scores_{role}")
        groups, rho = evidence_summary(ts, em, k_frac=cfg.top_k_frac)
        ev_rows.append({"role": role, "model": name, "spearman_S_EM": rho,
                        **{f"EM_{r.group}": r.mean for r in groups.itertuples()}})
        save_figure(run, f"heatmap_{role}", F.score_heatmap(ts, title=f"Truth Scores: {role} ({name})"), fmts)
        save_figure(run, f"evidence_{role}", F.evidence_scatter(ts, em, rho=rho,
                                                               title=f"S vs evidence attention: {role}"), fmts)
    run.save_table("evidence", pd.DataFrame(ev_rows))
    rows, wps, curves, wp_rho = [], {}, {}, []
    for role in [r for r in ("descendant", "control") if r in names]:
        st = lineage_correlation(scores["base"], scores[role], top_k_frac=cfg.top_k_frac,
                                 n_permutations=cfg.n_permutations, return_null=True)
        rows.append({"pair": f"base↔{role}", **{k: v for k, v in st.items() if k != "null"}})
        save_figure(run, f"scatter_base_{role}", F.pair_scatter(scores["base"], scores[role], name_a="base",
                                                              name_b=role, stats=st), fmts)
        save_figure(run, f"null_base_{role}", F.null_histogram(st["null"], st["pearson"], st["perm_p"]), fmts)
        curves[f"base↔{role}"] = per_layer_correlation(scores["base"], scores[role])
        wp = weight_preservation(models["base"], models[role])
        wps[f"base→{role}"] = wp
        run.save_table(f"weights_base_{role}", wp)
        rho = preservation_vs_score_change(wp, scores["base"], scores[role])
        wp_rho.append({"pair": f"base→{role}", **{f"rho_{k}": v for k, v in rho.items()},
                       **{f"mean_{c}": float(wp[c].mean()) for c in F.WP_COLUMNS}})
        save_figure(run, f"wp_vs_dS_{role}", F.weight_vs_score_change(wp, scores["base"], scores[role], "cos_OV",
                                                                     rho=rho["cos_OV"]), fmts)
    lineage = pd.DataFrame(rows)
    run.save_table("lineage", lineage)
    run.save_table("weight_preservation_summary", pd.DataFrame(wp_rho))
    save_figure(run, "per_layer", F.per_layer_curves(curves), fmts)
    save_figure(run, "weight_preservation", F.weight_preservation_lines(wps), fmts)
    save_figure(run, "topk", F.topk_jaccard_curve({k: (scores["base"], scores[k.split("↔")[1]])
                                                  for k in curves}), fmts)
    d = lineage.iloc[0]
    c = lineage.iloc[1] if len(lineage) > 1 else None
    run.save_json("summary", {
        "r_base_descendant": float(d["pearson"]), "r_base_control": None if c is None else float(c["pearson"]),
        "inheritance_holds": None if c is None else bool(d["pearson"] > c["pearson"]),
        "statistics": {r["pair"]: {k: r[k] for k in ("pearson", "spearman", "pearson_centered", "topk_jaccard",
                                                     "perm_p")} for r in rows}})


# --------------------------------------------------------------------------------------------- gating sweep
@dataclass
class GatingSweepConfig(ProbeRecipe):
    target: str = field(default="zoo:toy-chat", metadata={"help": "model to gate"})
    score_source: str = field(default="zoo:toy-base", metadata={"help": "model whose Truth Scores give the "
                                                                         "gates ('self' = the target's own)"})
    backend: str = "bridge"
    target_fmt: str = field(default="chat", metadata={"help": "prompt format for the target's generation"})
    source_fmt: str = field(default="raw", metadata={"help": "prompt format when scoring the source"})
    n_samples: int = 292
    data_seed: int = 0
    n_eval: int = field(default=256, metadata={"help": "counterfactual generation prompts"})
    eval_seed: int = 1
    eval_k_min: int = field(default=3, metadata={"help": "context pairs of the eval prompts (training range 3-6)"})
    eval_k_max: int = field(default=6, metadata={"help": "raise above 6 for a harder out-of-distribution variant"})
    modes: str = "normalize,contrast"
    sites: str = "z,attn_out_chunks"
    alphas: str = "0,0.1,0.3,1,2,4,6"
    figure_formats: str = "html"


@register_experiment("truth-gating-sweep", config=GatingSweepConfig,
                     help="TruthProbe soft gating over alpha (both modes, both sites) on CtxMem counterfactual "
                          "generation: context-following accuracy with base-model scores applied to a descendant")
def gating_sweep_experiment(cfg: GatingSweepConfig, run) -> None:
    from dataclasses import replace as dc_replace

    from interplab.figures import truth_scores as F
    from interplab.probes.truth_analysis import gating_sweep
    from interplab.probes.truth_data import ctxmem_counterfactual_set
    from interplab.probes.truth_scores import truth_scores
    from interplab.probes.truth_data import ctxmem_truth_set

    fmts = _formats(cfg.figure_formats)
    target = _load(cfg.target, cfg.backend)
    source = target if cfg.score_source in ("self", cfg.target) else _load(cfg.score_source, cfg.backend)
    fmt = cfg.target_fmt if source is target else cfg.source_fmt
    items = ctxmem_truth_set(cfg.n_samples, seed=cfg.data_seed, fmt=fmt, tokenizer=source.tokenizer)
    ts = truth_scores(source, items, **cfg.probe_kwargs())
    ts.check_shape(target.n_layers, target.n_heads)
    ts.save(run.path / "source_scores")
    evals = ctxmem_counterfactual_set(cfg.n_eval, seed=cfg.eval_seed, fmt=cfg.target_fmt, k_min=cfg.eval_k_min,
                                      k_max=cfg.eval_k_max)
    df = gating_sweep(target, evals, ts, modes=_formats(cfg.modes), sites=_formats(cfg.sites),
                      alphas=[float(a) for a in _formats(cfg.alphas)],
                      score_source="self" if source is target else cfg.score_source)
    run.save_table("sweep", df)
    save_figure(run, "sweep", F.gating_sweep(df), fmts)
    base = df[df["alpha"] == 0.0]["context_acc"].iloc[0] if (df["alpha"] == 0.0).any() else float("nan")
    best = df.loc[df["context_acc"].idxmax()]
    run.save_json("summary", {"baseline_context_acc": float(base), "best": best.to_dict(),
                              "source_mean_S": float(ts.scores.mean())})
