"""The Truth-Score studies (spec truth_scores.md §5-§8), each returning a typed result: the released maps' lineage
statistics, one model's map with its evidence attention and head ablations, inheritance along a base -> descendant
(-> control) lineage with weight preservation, and the TruthProbe gating sweep on CtxMem counterfactual generation.
The `truth-*` experiments and the app page are thin views over these."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from interplab.core.result import Result
from interplab.probes.truth.scores import TruthScores

# (map, mode, alpha) shipped in the repo's run scripts (spec §4)
SHIPPED_GATES = (
    ("vicuna", "contrast", 4.5), ("llama2", "contrast", 6.0), ("qwen2.5", "contrast", 6.0),
    ("vicuna", "normalize", 0.2), ("llava1.5", "normalize", 0.1), ("qwen2.5", "normalize", 0.3),
    ("qwen2.5_vl_instruct", "normalize", 0.3), ("vicuna", "contrast", 6.0), ("llava1.5", "contrast", 4.5),
)
LINEAGE_STATS = ("pearson", "spearman", "pearson_centered", "topk_jaccard", "perm_p")


@dataclass
class ProbeRecipe:
    """The Truth-Score probe recipe shared by the model studies (fields as in `TruthScoresConfig`)."""

    folds: int = 5
    fold_kind: str = "kfold"
    epochs: int = 200
    lr: float = 1e-2
    weight_decay: float = 1e-3
    seed: int = 42
    solver: str = "adamw"   # "adamw": the authors' recipe (faithful); "lbfgs": fast scikit-learn-equivalent optimum
    C: float = 1.0          # inverse L2 strength of the "lbfgs" objective

    def probe_kwargs(self) -> dict:
        return dict(folds=self.folds, fold_kind=self.fold_kind, epochs=self.epochs, lr=self.lr,
                    weight_decay=self.weight_decay, seed=self.seed, solver=self.solver, C=self.C)


def _pair_stats(st: Mapping) -> dict:
    return {k: v for k, v in st.items() if k != "null"}


# --------------------------------------------------------------------------------------------- released maps
@dataclass
class ReleasedLineage(Result):
    """Lineage statistics of a set of released maps.

    models: the maps' names (rows and columns of every matrix). lineage: one row per compared pair (`lineage_table`).
    matrices: statistic -> [K, K] (`correlation_matrix`; "pearson_repo_intersect" is the repo's common-index Pearson).
    per_layer: "a↔b" -> [n_layers] within-layer Pearson r. shipped_gates: `gate_summary` of each shipped gate
    setting. headline / headline_null: llama2 ↔ vicuna statistics and permutation null (empty when either is absent).
    """

    models: list[str]
    lineage: pd.DataFrame
    matrices: dict[str, np.ndarray]
    per_layer: dict[str, np.ndarray]
    shipped_gates: pd.DataFrame
    headline: dict = field(default_factory=dict)
    headline_null: np.ndarray | None = None

    def matrix(self, statistic: str) -> pd.DataFrame:
        """The [K, K] matrix of `statistic`, indexed by model name."""
        return pd.DataFrame(self.matrices[statistic], index=self.models, columns=self.models)

    def summary(self) -> dict:
        if not self.headline:
            return {}
        return {"r_llama2_vicuna": self.headline["pearson"], **self.headline}

    def to_frame(self) -> pd.DataFrame:
        return self.lineage


def released_lineage(maps: Mapping[str, TruthScores], *, top_k_frac: float = 0.05, n_permutations: int = 1000,
                     seed: int = 0) -> ReleasedLineage:
    """Lineage statistics of the released maps (`load_released_maps()`) along the spec's lineages."""
    from interplab.interventions.head_gate import gate_summary, truth_gates
    from interplab.probes.truth.lineage import (RELEASED_PAIRS, STATISTICS, correlation_matrix, lineage_correlation,
                                                lineage_table, per_layer_correlation)

    pairs = [p for p in RELEASED_PAIRS if p[0] in maps and p[1] in maps]
    table = lineage_table(maps, pairs, top_k_frac=top_k_frac, n_permutations=n_permutations, seed=seed)
    matrices = {stat: correlation_matrix(maps, stat, top_k_frac=top_k_frac).to_numpy() for stat in STATISTICS}
    matrices["pearson_repo_intersect"] = correlation_matrix(maps, "pearson", align="intersect").to_numpy()
    per_layer = {f"{a}↔{b}": per_layer_correlation(maps[a], maps[b]) for a, b in pairs}
    headline, null = {}, None
    if "llama2" in maps and "vicuna" in maps:
        st = lineage_correlation(maps["llama2"], maps["vicuna"], n_permutations=n_permutations, seed=seed,
                                 top_k_frac=top_k_frac, return_null=True)
        headline, null = _pair_stats(st), st["null"]
    gates = [{"map": n, "mode": mo, "alpha": a, **gate_summary(truth_gates(maps[n], mo, a))}
             for n, mo, a in SHIPPED_GATES if n in maps]
    return ReleasedLineage(models=list(maps), lineage=table, matrices=matrices, per_layer=per_layer,
                           shipped_gates=pd.DataFrame(gates), headline=headline, headline_null=null)


# --------------------------------------------------------------------------------------------- one model
@dataclass
class OrganismScores(Result):
    """One model's Truth-Score map on CtxMem verification prompts, with evidence attention.

    evidence_mass: [n_layers, n_heads] attention mass from the scored token onto the evidence (e_q, v_ctx).
    evidence_groups / rho_evidence: `evidence_summary` (top/bottom/random-k EM, Spearman(S, EM)).
    ablation_drop / verification_accuracy: Mode-V accuracy drop when zero-ablating each head, and the unablated
    accuracy (None when ablations were not run).
    """

    model: str
    scores: TruthScores
    evidence_mass: np.ndarray
    evidence_groups: pd.DataFrame
    rho_evidence: float
    ablation_drop: np.ndarray | None = None
    verification_accuracy: float | None = None

    def __post_init__(self):
        self.evidence_mass = np.asarray(self.evidence_mass)
        self.scores.check_shape(*self.evidence_mass.shape)

    def summary(self) -> dict:
        ts, em = self.scores, self.evidence_mass
        out = {"model": self.model, "mean_S": float(ts.scores.mean()), "max_S": float(ts.scores.max()),
               "top_heads": ts.top_heads(5), "spearman_S_EM": self.rho_evidence, "accuracy_step": ts.accuracy_step,
               "argmax_S": list(np.unravel_index(int(np.argmax(ts.scores)), ts.scores.shape)),
               "argmax_EM": list(np.unravel_index(int(np.argmax(em)), em.shape))}
        if self.ablation_drop is not None:
            from interplab.probes.stats import spearman

            drop = self.ablation_drop
            out.update({"verification_accuracy": self.verification_accuracy,
                        "argmax_ablation_drop": list(np.unravel_index(int(np.argmax(drop)), drop.shape)),
                        "max_ablation_drop": float(drop.max()), "spearman_S_ablation_drop": spearman(ts, drop)})
        return out

    def to_frame(self) -> pd.DataFrame:
        df = self.scores.to_frame()
        df["evidence_mass"] = self.evidence_mass.ravel()
        if self.ablation_drop is not None:
            df["ablation_drop"] = np.asarray(self.ablation_drop).ravel()
        return df


def score_organism(model, *, name: str = "", recipe: ProbeRecipe | None = None, n_samples: int = 292,
                   data_seed: int = 0, fmt: str = "raw", top_k_frac: float = 0.25,
                   ablation: bool = False) -> OrganismScores:
    """Truth Scores of `model` on `n_samples` CtxMem verification prompts, the evidence attention of every head,
    and (ablation=True) each head's zero-ablation effect on Mode-V accuracy (one forward set per head)."""
    from interplab.probes.truth.analysis import evidence_summary, head_ablation_effects
    from interplab.probes.truth.data import ctxmem_truth_set
    from interplab.probes.truth.scores import evidence_attention, truth_scores

    recipe = recipe or ProbeRecipe()
    items = ctxmem_truth_set(n_samples, seed=data_seed, fmt=fmt, tokenizer=model.tokenizer)
    ts = truth_scores(model, items, **recipe.probe_kwargs())
    ts.provenance.update({"data": f"CtxMem verification, n={n_samples}, seed={data_seed}, fmt={fmt}"})
    em = evidence_attention(model, items)
    groups, rho = evidence_summary(ts, em, k_frac=top_k_frac)
    drop = acc = None
    if ablation:
        drop, acc = head_ablation_effects(model, items)
    return OrganismScores(model=name or str(getattr(model, "name", "") or ""), scores=ts, evidence_mass=em,
                          evidence_groups=groups, rho_evidence=rho, ablation_drop=drop, verification_accuracy=acc)


# --------------------------------------------------------------------------------------------- lineage
@dataclass
class LineageStudy(Result):
    """Inheritance of Truth-Score maps from `base` to `descendant`, against a `control` of no shared lineage.

    lineage: one row per pair ("base↔descendant", "base↔control") with `lineage_correlation`'s statistics.
    nulls / per_layer: role -> the pair's permutation null / within-layer Pearson r.
    weights_<role>: `weight_preservation(base, role)`; weight_summary: per pair, Spearman of each weight similarity
    with -|ΔS| (rho_*) and the mean of each cosine (mean_*).
    reliability: the base map's own re-estimate reliability, the ceiling of r(base, descendant) (world facts only):
    fold_seed_r_min (other fold seeds, same facts), split_half_r / split_half_full (two halves of the facts, and
    Spearman-Brown to full length), the same for AUROC maps, r_auroc (base ↔ descendant on AUROC), n_facts.
    drift: how far the descendant moved: global_rel_change (all matrices), mean_rel_change, one_minus_cos_OV, and
    kl_facts / ce_base / ce_desc (next-token KL(base || descendant) and cross-entropies on the context-answer probe
    texts, world facts only). weight_drift: per matrix (`drift.weight_drift`, base → descendant)."""

    base: OrganismScores
    descendant: OrganismScores
    lineage: pd.DataFrame
    nulls: dict[str, np.ndarray]
    per_layer: dict[str, np.ndarray]
    weights_descendant: pd.DataFrame
    weight_summary: pd.DataFrame
    control: OrganismScores | None = None
    weights_control: pd.DataFrame | None = None
    reliability: dict = field(default_factory=dict)
    drift: dict = field(default_factory=dict)
    weight_drift: pd.DataFrame | None = None

    @property
    def roles(self) -> list[str]:
        return ["descendant"] + (["control"] if self.control is not None else [])

    def organisms(self) -> dict[str, OrganismScores]:
        return {"base": self.base, **{r: getattr(self, r) for r in self.roles}}

    def evidence_table(self) -> pd.DataFrame:
        """One row per model: Spearman(S, EM) and the mean EM of each head group."""
        return pd.DataFrame([{"role": role, "model": o.model, "spearman_S_EM": o.rho_evidence,
                              **{f"EM_{r.group}": r.mean for r in o.evidence_groups.itertuples()}}
                             for role, o in self.organisms().items()])

    def summary(self) -> dict:
        d = self.lineage.iloc[0]
        c = self.lineage.iloc[1] if len(self.lineage) > 1 else None
        return {"r_base_descendant": float(d["pearson"]), "r_base_control": None if c is None else float(c["pearson"]),
                "inheritance_holds": None if c is None else bool(d["pearson"] > c["pearson"]),
                "statistics": {r["pair"]: {k: r[k] for k in LINEAGE_STATS}
                               for r in self.lineage.to_dict("records")},
                **({"reliability": self.reliability} if self.reliability else {}),
                **({"drift": self.drift} if self.drift else {})}

    def to_frame(self) -> pd.DataFrame:
        return self.lineage


def facts_organism(model, items: Sequence[Mapping], *, name: str = "", recipe: ProbeRecipe | None = None,
                   data_seed: int = 0, top_k_frac: float = 0.25, n_null: int = 20, reliability: bool = False,
                   return_map: bool = False):
    """`score_organism` on counterfactual world facts (`world_facts.counterfactual_items`): the map of
    `facts_truth_map` (grouped folds, `n_null` label-permutation maps kept in the scores' provenance as the
    family-wise threshold) with its evidence attention. reliability: also the maps under two other fold seeds and
    of two halves of the facts (the map's own reliability). return_map: (OrganismScores, FactsTruthMap)."""
    from interplab.probes.truth.analysis import evidence_summary
    from interplab.probes.truth.facts_map import fact_probe_rows, facts_truth_map
    from interplab.probes.truth.scores import TruthScoresConfig

    recipe = recipe or ProbeRecipe()
    fm = facts_truth_map(model, fact_probe_rows(model, items, seed=data_seed),
                         config=TruthScoresConfig(**recipe.probe_kwargs()), n_null=n_null,
                         fold_seeds=(1, 2) if reliability else (), split_half=reliability, n_boot=0)
    summ = fm.summary()
    fm.scores.provenance.update({"data": f"world facts, {len(items)} counterfactual items, seed {data_seed}",
                                 "n_sig_maxt": summ["n_sig_maxt"], "null_max_threshold": summ["null_max_threshold"],
                                 "n_null": n_null})
    groups, rho = evidence_summary(fm.scores, fm.evidence_mass, k_frac=top_k_frac)
    org = OrganismScores(model=name or str(getattr(model, "name", "") or ""), scores=fm.scores,
                         evidence_mass=fm.evidence_mass, evidence_groups=groups, rho_evidence=rho)
    return (org, fm) if return_map else org


def _map_reliability(fm, other_scores) -> dict:
    """The base map's own reliability (the ceiling of its correlation with a descendant's map) and the AUROC maps'
    correlation with the descendant's."""
    sh = fm.split_half()
    a, b = fm.scores.auroc.ravel(), other_scores.auroc.ravel()
    ok = np.isfinite(a) & np.isfinite(b)
    return {"fold_seed_r_min": fm.stability("S")["r_min"], "fold_seed_r_min_auroc": fm.stability("auroc")["r_min"],
            "split_half_r": sh["S"]["r_half"], "split_half_full": sh["S"]["r_full"],
            "split_half_r_auroc": sh["auroc"]["r_half"], "split_half_full_auroc": sh["auroc"]["r_full"],
            "r_auroc": float(np.corrcoef(a[ok], b[ok])[0, 1]) if ok.sum() > 2 else float("nan"),
            "n_facts": int(fm.rows["index"].nunique()), "n_fold_seeds": int(len(fm.seed_maps))}


def _descendant_drift(base, desc, texts: Sequence | None) -> tuple[dict, pd.DataFrame]:
    """How far `desc` moved from `base`: per-matrix weight drift and, given token-id texts, next-token KL."""
    from interplab.probes.truth.drift import drift_summary, next_token_kl, weight_drift

    wd = weight_drift(base.hf_model, desc.hf_model)
    summ = drift_summary(wd)
    out = {"global_rel_change": summ["global_rel_change"], "mean_rel_change": summ["mean_rel_change"],
           "per_kind_mean_rel_change": {k: v["mean_rel_change"] for k, v in summ["per_kind"].items()}}
    if texts:
        pad = base.tokenizer.pad_token_id if base.tokenizer.pad_token_id is not None else 0
        kl = next_token_kl(base.hf_model, desc.hf_model, texts, pad_id=pad)
        w = kl["n_tokens"].to_numpy(float)
        out.update({"kl_facts": float(np.average(kl["kl"], weights=w)), "n_kl_texts": int(len(kl)),
                    "ce_base": float(np.average(kl["ce_base"], weights=w)),
                    "ce_desc": float(np.average(kl["ce_desc"], weights=w))})
    return out, wd


def lineage_study(models: Mapping[str, object], names: Mapping[str, str] | None = None, *,
                  recipe: ProbeRecipe | None = None, n_samples: int = 292, data_seed: int = 0, fmt: str = "raw",
                  top_k_frac: float = 0.25, n_permutations: int = 1000, items: Sequence[Mapping] | None = None,
                  n_null: int = 20) -> LineageStudy:
    """Score `models` {"base", "descendant"[, "control"]: LabModel} on the same prompts and compare base with each
    other role: lineage statistics, per-layer correlation, weight preservation vs score change.
    names: role -> the name shown in tables (default: the models' own names). items: counterfactual world-fact
    items (`facts_organism`, the real-model data; n_null label-permutation maps per role) instead of CtxMem."""
    from interplab.probes.truth.lineage import lineage_correlation, per_layer_correlation
    from interplab.probes.truth.weights import WP_COLUMNS, preservation_vs_score_change, weight_preservation

    names = dict(names or {})
    orgs, base_map = {}, None
    for role in [r for r in ("base", "descendant", "control") if r in models]:
        name = names.get(role) or str(getattr(models[role], "name", "") or role)
        if items is not None and role == "base":
            orgs[role], base_map = facts_organism(models[role], items, name=name, recipe=recipe, data_seed=data_seed,
                                                  top_k_frac=top_k_frac, n_null=n_null, reliability=True,
                                                  return_map=True)
        elif items is not None:
            orgs[role] = facts_organism(models[role], items, name=name, recipe=recipe, data_seed=data_seed,
                                        top_k_frac=top_k_frac, n_null=n_null)
        else:
            orgs[role] = score_organism(models[role], name=name, recipe=recipe, n_samples=n_samples,
                                        data_seed=data_seed, fmt=fmt, top_k_frac=top_k_frac)
        orgs[role].scores.model = f"{role}:{name}"
    base = orgs["base"].scores
    rows, nulls, curves, weights, wp_rows = [], {}, {}, {}, []
    for role in [r for r in ("descendant", "control") if r in orgs]:
        other = orgs[role].scores
        st = lineage_correlation(base, other, top_k_frac=top_k_frac, n_permutations=n_permutations,
                                 return_null=True)
        rows.append({"pair": f"base↔{role}", **_pair_stats(st)})
        nulls[role] = st["null"]
        curves[role] = per_layer_correlation(base, other)
        wp = weight_preservation(models["base"], models[role])
        weights[role] = wp
        rho = preservation_vs_score_change(wp, base, other)
        wp_rows.append({"pair": f"base→{role}", **{f"rho_{k}": v for k, v in rho.items()},
                        **{f"mean_{c}": float(wp[c].mean()) for c in WP_COLUMNS}})
    reliability, drift, wdrift = {}, {}, None
    if base_map is not None:
        from interplab.probes.truth.facts_map import fact_probe_rows

        reliability = _map_reliability(base_map, orgs["descendant"].scores)
        texts = [r["text"] for r in fact_probe_rows(models["base"], items, seed=data_seed) if r["label"] == 1]
        drift, wdrift = _descendant_drift(models["base"], models["descendant"], texts)
        drift["one_minus_cos_OV"] = float(1 - weights["descendant"]["cos_OV"].mean())
    return LineageStudy(base=orgs["base"], descendant=orgs["descendant"], control=orgs.get("control"),
                        lineage=pd.DataFrame(rows), nulls=nulls, per_layer=curves,
                        weights_descendant=weights["descendant"], weights_control=weights.get("control"),
                        weight_summary=pd.DataFrame(wp_rows), reliability=reliability, drift=drift,
                        weight_drift=wdrift)


# --------------------------------------------------------------------------------------------- gating sweep
@dataclass
class GatingSweep(Result):
    """Context-following accuracy of a target model under TruthProbe gates from `source_scores`.

    table: one row per (mode, site, alpha), `gating_sweep`'s columns. score_source: "self" or the source's name."""

    source_scores: TruthScores
    table: pd.DataFrame
    score_source: str = "self"

    @property
    def baseline_context_acc(self) -> float:
        df = self.table
        return df[df["alpha"] == 0.0]["context_acc"].iloc[0] if (df["alpha"] == 0.0).any() else float("nan")

    def best(self) -> dict:
        return self.table.loc[self.table["context_acc"].idxmax()].to_dict()

    def summary(self) -> dict:
        return {"baseline_context_acc": float(self.baseline_context_acc), "best": self.best(),
                "source_mean_S": float(self.source_scores.scores.mean())}

    def to_frame(self) -> pd.DataFrame:
        return self.table


def gating_study(target, source=None, *, score_source: str = "self", recipe: ProbeRecipe | None = None,
                 target_fmt: str = "chat", source_fmt: str = "raw", n_samples: int = 292, data_seed: int = 0,
                 n_eval: int = 256, eval_seed: int = 1, eval_k_min: int = 3, eval_k_max: int = 6,
                 modes: Sequence[str] = ("normalize", "contrast"), sites: Sequence[str] = ("z", "attn_out_chunks"),
                 alphas: Sequence[float] = (0, 0.1, 0.3, 1, 2, 4, 6), rebase: str = "none") -> GatingSweep:
    """Score `source` (None: the target itself, on target_fmt prompts) on CtxMem verification, then sweep gates
    from its map over (mode, site, alpha) on the target's counterfactual generation (`gating_sweep`)."""
    from interplab.probes.truth.analysis import gating_sweep
    from interplab.probes.truth.data import ctxmem_counterfactual_set, ctxmem_truth_set
    from interplab.probes.truth.scores import truth_scores

    recipe = recipe or ProbeRecipe()
    own = source is None or source is target
    source = target if own else source
    items = ctxmem_truth_set(n_samples, seed=data_seed, fmt=target_fmt if own else source_fmt,
                             tokenizer=source.tokenizer)
    ts = truth_scores(source, items, **recipe.probe_kwargs())
    ts.check_shape(target.n_layers, target.n_heads)
    evals = ctxmem_counterfactual_set(n_eval, seed=eval_seed, fmt=target_fmt, k_min=eval_k_min, k_max=eval_k_max)
    label = "self" if own else score_source
    df = gating_sweep(target, evals, ts, modes=tuple(modes), sites=tuple(sites), alphas=[float(a) for a in alphas],
                      score_source=label, rebase=rebase)
    return GatingSweep(source_scores=ts, table=df, score_source=label)
