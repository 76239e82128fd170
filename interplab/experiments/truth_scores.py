"""Truth-Score experiments (spec truth_scores.md): released-map lineage table, Truth-Score maps of the toy
organisms, inheritance along the toy lineage with weight preservation and evidence attention, and the TruthProbe
gating sweep on CtxMem counterfactual generation. The studies live in `interplab.probes.truth.studies`.

    interplab run truth-released-lineage
    interplab run truth-scores --set model=zoo:toy-base
    interplab run truth-lineage --set base=zoo:toy-base --set descendant=zoo:toy-chat --set control=zoo:toy-base-s2
    interplab run truth-gating-sweep --set target=zoo:toy-chat --set score_source=zoo:toy-base
"""
from __future__ import annotations

from dataclasses import dataclass, field

from interplab.core import progress
from interplab.experiments.registry import register_experiment
from interplab.figures import truth_scores as F
from interplab.figures.export import save_figure
from interplab.probes.truth.studies import ProbeRecipe


def _load(name: str, backend: str = "bridge"):
    import interplab

    return interplab.load_model(name, backend=backend, device="cpu")


def _formats():
    return field(default_factory=lambda: ["html"], metadata={"help": "figure export formats (empty: json only)"})


# --------------------------------------------------------------------------------------------- released maps
@dataclass
class ReleasedLineageConfig:
    directory: str = field(default="", metadata={"help": "folder of converted_score_cv5_head_metrics_*.npy "
                                                          "(default: $INTERPLAB_SHARED_DATA/truthprobe_scores, "
                                                          "else ../shared/data/truthprobe_scores)"})
    n_permutations: int = field(default=1000, metadata={"help": "within-layer head-shuffle null size"})
    top_k_frac: float = field(default=0.05, metadata={"help": "top-k fraction for the Jaccard overlap"})
    seed: int = field(default=0, metadata={"help": "permutation seed"})
    figure_formats: list[str] = _formats()


@register_experiment("truth-released-lineage", config=ReleasedLineageConfig,
                     help="Lineage statistics of the authors' 7 released Truth-Score maps (r(llama2, vicuna) = 0.85)")
def released_lineage(cfg: ReleasedLineageConfig, run) -> None:
    from interplab.interventions.head_gate import truth_gates
    from interplab.probes.truth.lineage import load_released_maps
    from interplab.probes.truth.studies import released_lineage as study

    maps = load_released_maps(cfg.directory or None)
    fmts = cfg.figure_formats
    res = study(maps, top_k_frac=cfg.top_k_frac, n_permutations=cfg.n_permutations, seed=cfg.seed)
    run.save_result("released_lineage", res)
    for stat in ("pearson", "pearson_centered"):
        save_figure(run, f"matrix_{stat}", F.lineage_matrix(res.matrix(stat), statistic=stat), fmts)
    save_figure(run, "per_layer", F.per_layer_curves(res.per_layer), fmts)
    if res.headline:
        st = res.headline
        save_figure(run, "scatter_llama2_vicuna", F.pair_scatter(maps["llama2"], maps["vicuna"], name_a="llama2",
                                                                name_b="vicuna", stats=st), fmts)
        save_figure(run, "null_llama2_vicuna", F.null_histogram(res.headline_null, st["pearson"], st["perm_p"]),
                    fmts)
        run.save_json("summary", res.summary())
    if "qwen2.5" in maps:
        save_figure(run, "gates_qwen2.5_contrast6", F.gate_preview(truth_gates(maps["qwen2.5"], "contrast", 6.0)),
                    fmts)


# --------------------------------------------------------------------------------------------- one organism
@dataclass
class TruthScoresExpConfig(ProbeRecipe):
    model: str = field(default="zoo:toy-base", metadata={"help": "model to score (zoo name, local dir, hub id)"})
    backend: str = field(default="bridge", metadata={"help": "bridge or nnsight"})
    n_samples: int = field(default=292, metadata={"help": "CtxMem verification prompts (the repo uses 292)"})
    data_seed: int = field(default=0, metadata={"help": "CtxMem sampling seed (world-facts: the counterfactual "
                                                         "and row-order seed)"})
    fmt: str = field(default="raw", metadata={"help": "CtxMem prompt format: raw or chat (world-facts texts use the "
                                                      "model's chat template when it has one)"})
    top_k_frac: float = field(default=0.25, metadata={"help": "head fraction for the top/bottom/random EM groups"})
    ablation: bool = field(default=True, metadata={"help": "zero-ablate each head's z and measure the Mode-V "
                                                           "accuracy drop (one forward set per head)"})
    data: str = field(default="", metadata={"help": "'world-facts' (counterfactual world facts, the real-model set), "
                                                    "or your own data instead of CtxMem: a CSV/JSONL with "
                                                    "text,label columns, or a HaluEval-QA file (first n_samples "
                                                    "rows); docs/data.md"})
    known: str = field(default="shipped", metadata={"help": "world-facts only: which facts to keep: 'shipped' (the "
                                                            "model's shipped closed-book filter), another model's "
                                                            "shipped filter by name (e.g. smollm2-135m-instruct), "
                                                            "'compute' (answer them closed-book now), 'all'"})
    n_facts: int = field(default=0, metadata={"help": "world-facts only: at most this many facts (0 = all kept)"})
    distractors: bool = field(default=True, metadata={"help": "world-facts only: add an in-context same-relation "
                                                              "distractor answer (label 0) to each fact; false: "
                                                              "context vs memory pairs only"})
    n_null: int = field(default=200, metadata={"help": "world-facts only: label-permutation null maps"})
    alpha: float = field(default=0.05, metadata={"help": "world-facts only: significance level (maxT and BH)"})
    n_boot: int = field(default=1000, metadata={"help": "world-facts only: fact resamples of the per-head "
                                                        "intervals and of the held-out best head"})
    figure_formats: list[str] = _formats()


WORLD_FACTS = "world-facts"
KNOWN_MODES = ("shipped", "compute", "all")


def _facts_scores(cfg: TruthScoresExpConfig, run) -> None:
    """The map on counterfactual world facts with its label-permutation null (issue 27 §1; spec truth_scores.md
    §9)."""
    from interplab.probes.truth.facts_map import fact_probe_rows, facts_truth_map
    from interplab.probes.truth.map_verdicts import map_verdicts
    from interplab.probes.truth.scores import TruthScoresConfig

    model = _load(cfg.model, cfg.backend)
    items = _known_items(cfg, model)
    if cfg.n_facts:
        items = items[:cfg.n_facts]
    recipe = TruthScoresConfig(**cfg.probe_kwargs())
    res = facts_truth_map(model, fact_probe_rows(model, items, seed=cfg.data_seed), config=recipe,
                          n_null=cfg.n_null, alpha=cfg.alpha, n_boot=cfg.n_boot)
    run.save_result("facts_map", res)
    run.save_json("summary", {"model": cfg.model, "data": WORLD_FACTS, "known": cfg.known,
                              "distractors": cfg.distractors, **res.summary()})
    if cfg.n_boot:      # the verdicts read the fact-bootstrap intervals
        contrast = facts_contrast(res, n_boot=cfg.n_boot)
        if contrast is not None:
            run.save_json("contrast", contrast[0])
            run.save_table("contrast", contrast[1])
        _save_validity(run, map_verdicts(res, contrast=None if contrast is None else contrast[0]))
    run.save_table("scores", res.to_frame())
    run.save_table("per_layer", res.per_layer())
    fmts = cfg.figure_formats
    save_figure(run, "heatmap", F.score_heatmap(res.scores), fmts)
    from interplab.probes.truth.scores import TruthScores

    save_figure(run, "heatmap_auroc", F.score_heatmap(TruthScores.from_array(res.scores.auroc, model=cfg.model),
                                                      title=f"Held-out AUROC (chance 0.5): {cfg.model}"), fmts)
    save_figure(run, "significant_per_layer", F.significant_heads_per_layer(res.per_layer()), fmts)
    top = res.top_head()
    save_figure(run, "null_max", F.null_histogram(res.null_maps.reshape(res.n_null, -1).max(1), top["S"],
                                                  top["p_maxt"], statistic="max S over heads",
                                                  title="Label-permutation null: each null map's best head"), fmts)
    rho = res.rho_evidence()
    save_figure(run, "evidence_scatter", F.evidence_scatter(res.scores, res.evidence_mass, rho=rho), fmts)


def facts_contrast(res, *, n_boot: int = 1000, n_swaps: int = 1000):
    """(summary, per-head table) of the context answer against the in-context distractor
    (`map_contrast.contrast_summary`), or None for a map without distractors."""
    from interplab.probes.truth.map_contrast import contrast_summary

    if "distractor" not in set(res.rows.get("candidate_kind", [])):
        return None
    return contrast_summary(res, "distractor", n_swaps=n_swaps, n_boot=n_boot)


def _save_validity(run, verdicts) -> None:
    """The run's verdicts and their checks (`interplab runs show` prints them; the app shows them beside the
    numbers)."""
    from interplab.probes.validity import VALIDITY_RESULT, ValidityReport

    run.save_result(VALIDITY_RESULT, ValidityReport.of(verdicts))


def _known_items(cfg, model) -> list[dict]:
    """The counterfactual items of the facts `cfg.known` keeps for `model` (see TruthScoresExpConfig.known)."""
    from interplab.core.errors import ConfigError
    from interplab.data.world_facts import (counterfactual_items, known_facts, load_facts, load_known,
                                            shipped_known)

    if cfg.known not in KNOWN_MODES and cfg.known not in shipped_known():
        raise ConfigError(f"known must be one of {KNOWN_MODES} or a shipped filter {shipped_known()}, got "
                          f"{cfg.known!r}")
    facts = load_facts()
    if cfg.known not in KNOWN_MODES:
        keep = load_known(cfg.known, facts).to_numpy()
    elif cfg.known == "shipped":
        keep = load_known(getattr(cfg, "model", "") or getattr(cfg, "target", "") or getattr(cfg, "base", ""),
                          facts).to_numpy()
    elif cfg.known == "compute":
        keep = known_facts(model, facts, max_new_tokens=16)["known"].to_numpy()
    else:
        keep = [True] * len(facts)
    items = counterfactual_items(facts, seed=cfg.data_seed, distractor=getattr(cfg, "distractors", True))
    return [it for it, k in zip(items, keep) if k]


def _user_data_scores(cfg: TruthScoresExpConfig, run) -> None:
    """Truth Scores of cfg.model on a user / HaluEval file (no evidence attention: the file has no evidence)."""
    from interplab.probes.truth import truth_scores, user_truth_set

    items = user_truth_set(cfg.data, limit=cfg.n_samples)
    ts = truth_scores(_load(cfg.model, cfg.backend), items, **cfg.probe_kwargs())
    run.save_result("truth_scores", ts)
    run.save_json("summary", {"model": cfg.model, "data": cfg.data, "n_samples": len(items),
                              "n_positive": int(sum(it["label"] for it in items)),
                              "mean_S": float(ts.scores.mean()), "max_S": float(ts.scores.max()),
                              "top_heads": ts.top_heads(5), "accuracy_step": ts.accuracy_step})
    save_figure(run, "heatmap", F.score_heatmap(ts), cfg.figure_formats)
    save_figure(run, "diagnostics", F.probe_diagnostics(ts), cfg.figure_formats)


@register_experiment("truth-scores", config=TruthScoresExpConfig,
                     help="Truth-Score map of one model on CtxMem verification, with evidence attention")
def truth_scores_experiment(cfg: TruthScoresExpConfig, run) -> None:
    with progress.task(0, "stages", phase="Truth-Score map"):   # progress.json: the harvest's prompts below it
        _truth_scores(cfg, run)


def _truth_scores(cfg: TruthScoresExpConfig, run) -> None:
    from interplab.probes.truth.studies import score_organism

    if cfg.data == WORLD_FACTS:
        _facts_scores(cfg, run)
        return
    if cfg.data:
        _user_data_scores(cfg, run)
        return
    res = score_organism(_load(cfg.model, cfg.backend), name=cfg.model, recipe=cfg, n_samples=cfg.n_samples,
                         data_seed=cfg.data_seed, fmt=cfg.fmt, top_k_frac=cfg.top_k_frac, ablation=cfg.ablation)
    run.save_result("truth_scores", res)
    run.save_json("summary", res.summary())
    run.save_table("scores", res.scores.to_frame())  # the tidy per-head table (fold means), for spreadsheets
    ts, em, fmts = res.scores, res.evidence_mass, cfg.figure_formats
    save_figure(run, "heatmap", F.score_heatmap(ts), fmts)
    save_figure(run, "evidence_scatter", F.evidence_scatter(ts, em, rho=res.rho_evidence), fmts)
    save_figure(run, "evidence_groups", F.evidence_group_bars(res.evidence_groups), fmts)
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
    data: str = field(default="", metadata={"help": "'' (CtxMem, the organisms' language) or 'world-facts' (the "
                                                    "counterfactual world facts of truth-scores, the real-model "
                                                    "data; every role reads the same items)"})
    known: str = field(default="shipped", metadata={"help": "world-facts only: which facts ('shipped' = the base's "
                                                            "filter; as in truth-scores)"})
    distractors: bool = field(default=True, metadata={"help": "world-facts only: in-context distractor rows"})
    n_facts: int = field(default=0, metadata={"help": "world-facts only: at most this many facts (0 = all kept)"})
    n_null: int = field(default=20, metadata={"help": "world-facts only: label-permutation maps per role (each "
                                                      "map's family-wise threshold)"})
    figure_formats: list[str] = _formats()


@register_experiment("truth-lineage", config=LineageExpConfig,
                     help="Inheritance of Truth-Score maps: r(base, descendant) vs r(base, control), weight "
                          "preservation vs score change, evidence attention vs score")
def lineage_experiment(cfg: LineageExpConfig, run) -> None:
    from interplab.probes.truth.studies import lineage_study

    names = {"base": cfg.base, "descendant": cfg.descendant, "control": cfg.control}
    if not cfg.control:
        names.pop("control")
    models = {role: _load(name, cfg.backend) for role, name in names.items()}
    items = None
    if cfg.data == WORLD_FACTS:
        items = _known_items(cfg, models["base"])
        items = items[:cfg.n_facts] if cfg.n_facts else items
    elif cfg.data:
        from interplab.core.errors import ConfigError

        raise ConfigError(f"truth-lineage data must be '' (CtxMem) or {WORLD_FACTS!r}; got {cfg.data!r}")
    res = lineage_study(models, names, recipe=cfg, n_samples=cfg.n_samples, data_seed=cfg.data_seed, fmt=cfg.fmt,
                        top_k_frac=cfg.top_k_frac, n_permutations=cfg.n_permutations, items=items,
                        n_null=cfg.n_null)
    run.save_result("lineage", res)
    run.save_json("summary", res.summary())
    if res.reliability:          # world facts: the base map's reliability and the descendant's drift are known
        from interplab.probes.truth.map_verdicts import lineage_verdicts

        _save_validity(run, lineage_verdicts(res))
        run.save_table("weight_drift", res.weight_drift)
    fmts = cfg.figure_formats
    for role, org in res.organisms().items():
        run.save_table(f"scores_{role}", org.scores.to_frame())
    for role, org in res.organisms().items():
        save_figure(run, f"heatmap_{role}", F.score_heatmap(org.scores, title=f"Truth Scores: {role} ({org.model})"),
                    fmts)
        save_figure(run, f"evidence_{role}", F.evidence_scatter(org.scores, org.evidence_mass, rho=org.rho_evidence,
                                                               title=f"S vs evidence attention: {role}"), fmts)
    base = res.base.scores
    wsum = res.weight_summary.set_index("pair")
    for role, st in zip(res.roles, res.lineage.to_dict("records")):
        other = getattr(res, role).scores
        save_figure(run, f"scatter_base_{role}", F.pair_scatter(base, other, name_a="base", name_b=role, stats=st),
                    fmts)
        save_figure(run, f"null_base_{role}", F.null_histogram(res.nulls[role], st["pearson"], st["perm_p"]), fmts)
        save_figure(run, f"wp_vs_dS_{role}", F.weight_vs_score_change(
            getattr(res, f"weights_{role}"), base, other, "cos_OV", rho=wsum.loc[f"base→{role}", "rho_cos_OV"]), fmts)
    save_figure(run, "per_layer", F.per_layer_curves({f"base↔{r}": c for r, c in res.per_layer.items()}), fmts)
    save_figure(run, "weight_preservation", F.weight_preservation_lines(
        {f"base→{r}": getattr(res, f"weights_{r}") for r in res.roles}), fmts)
    save_figure(run, "topk", F.topk_jaccard_curve({f"base↔{r}": (base, getattr(res, r).scores) for r in res.roles}),
                fmts)


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
    modes: list[str] = field(default_factory=lambda: ["normalize", "contrast"])
    sites: list[str] = field(default_factory=lambda: ["z", "attn_out_chunks"])
    alphas: list[float] = field(default_factory=lambda: [0.0, 0.1, 0.3, 1.0, 2.0, 4.0, 6.0])
    rebase: str = field(default="none", metadata={"help": "'layer_mean' keeps every layer's mean gate at 1 so a "
                                                          "strength means the same at any depth (deep/real models); "
                                                          "'none' is the paper's gates"})
    data: str = field(default="", metadata={"help": "'' (CtxMem, the organisms' language) or 'world-facts' (the "
                                                    "real-model protocol: probe / tune / eval splits of known facts, "
                                                    "docs/truth_scores.md 'On a real model')"})
    known: str = field(default="shipped", metadata={"help": "world-facts only: as in truth-scores"})
    distractors: bool = field(default=True, metadata={"help": "world-facts only: a same-relation distractor "
                                                              "sentence in every context (as in truth-scores)"})
    n_facts: int = field(default=0, metadata={"help": "world-facts only: at most this many facts (0 = all kept)"})
    n_maps: int = field(default=40, metadata={"help": "world-facts only: within-layer shuffled maps of the null "
                                                      "(p's floor is 1 / (n_maps + 1))"})
    max_new_tokens: int = field(default=12, metadata={"help": "world-facts only: generated answer length"})
    # world-facts tuning (interplab.probes.truth.gating_select): the grid per mode, the paper's α range per mode
    normalize_alphas: list[float] = field(default_factory=lambda: [0.1, 0.2, 0.3], metadata={
        "help": "world-facts only: normalize α grid (the paper's shipped values; empty to leave the mode out)"})
    contrast_alphas: list[float] = field(default_factory=lambda: [4.5, 6.0, 7.5], metadata={
        "help": "world-facts only: contrast α grid (the paper's shipped values; empty to leave the mode out)"})
    normalize_range: list[float] = field(default_factory=lambda: [0.1, 0.3], metadata={
        "help": "world-facts only: the paper's normalize α range [lo, hi] (shipped POPE settings)"})
    contrast_range: list[float] = field(default_factory=lambda: [4.5, 7.5], metadata={
        "help": "world-facts only: the paper's contrast α range [lo, hi] (shipped HaluEval and CHAIR settings)"})
    allow_out_of_range: bool = field(default=False, metadata={
        "help": "world-facts only: allow grid values outside the ranges (a chosen one fails the setting_range "
                "check: its verdicts are inconclusive)"})
    select_by: str = field(default="generated_context", metadata={
        "help": "world-facts only: the tune rate that chooses among the eligible settings (generated_context | "
                "forced_choice)"})
    n_null_replies: int = field(default=2, metadata={
        "help": "world-facts only: shuffled maps whose eval replies are generated and checked for degeneracy"})
    figure_formats: list[str] = _formats()

    def validate(self) -> None:
        """Checks that fail fast, before the source model is scored."""
        from interplab.core.errors import ConfigError
        from interplab.interventions.head_gate import GATE_REBASES

        if self.rebase not in GATE_REBASES:
            raise ConfigError(f"rebase must be one of {GATE_REBASES}, got {self.rebase!r}")
        if self.data == WORLD_FACTS:
            from interplab.probes.truth.gating_select import SELECT_BY, gate_grid

            if len(self.sites) != 1:
                raise ConfigError(f"world-facts gating takes one site, got sites={self.sites}")
            if self.select_by not in SELECT_BY:
                raise ConfigError(f"select_by must be one of {SELECT_BY}, got {self.select_by!r}")
            gate_grid(self.facts_alphas(), self.facts_ranges(), allow_out_of_range=self.allow_out_of_range)

    def facts_alphas(self) -> dict[str, list[float]]:
        """The world-facts grid {mode: [α, ...]} of the modes in `modes` that have a grid."""
        grids = {"normalize": self.normalize_alphas, "contrast": self.contrast_alphas}
        return {m: list(grids[m]) for m in self.modes if m in grids and grids[m]}

    def facts_ranges(self) -> dict[str, list[float]]:
        return {"normalize": list(self.normalize_range), "contrast": list(self.contrast_range)}


@register_experiment("truth-gating-sweep", config=GatingSweepConfig,
                     help="TruthProbe soft gating over alpha (both modes, both sites) on CtxMem counterfactual "
                          "generation: context-following accuracy with base-model scores applied to a descendant")
def gating_sweep_experiment(cfg: GatingSweepConfig, run) -> None:
    from interplab.probes.truth.studies import gating_study

    cfg.validate()
    if cfg.data == WORLD_FACTS:
        _facts_gating(cfg, run)
        return
    target = _load(cfg.target, cfg.backend)
    source = None if cfg.score_source in ("self", cfg.target) else _load(cfg.score_source, cfg.backend)
    res = gating_study(target, source, score_source=cfg.score_source, recipe=cfg, target_fmt=cfg.target_fmt,
                       source_fmt=cfg.source_fmt, n_samples=cfg.n_samples, data_seed=cfg.data_seed, n_eval=cfg.n_eval,
                       eval_seed=cfg.eval_seed, eval_k_min=cfg.eval_k_min, eval_k_max=cfg.eval_k_max,
                       modes=cfg.modes, sites=cfg.sites, alphas=cfg.alphas, rebase=cfg.rebase)
    run.save_result("sweep", res)
    run.save_json("summary", res.summary())
    run.save_table("source_scores", res.source_scores.to_frame())
    save_figure(run, "sweep", F.gating_sweep(res.table), cfg.figure_formats)


def _facts_gating(cfg: GatingSweepConfig, run) -> None:
    """TruthProbe gating on world facts: probe / tune / eval splits, tuning under the fluency constraint, shuffled-map
    null, verdicts (spec truth_scores.md §9; interplab.probes.truth.facts_gating, gating_verdicts)."""
    from interplab.probes.truth.facts_gating import facts_gating, probe_map, split_items
    from interplab.probes.truth.gating_verdicts import gating_verdicts
    from interplab.probes.truth.scores import TruthScoresConfig
    from interplab.probes.validity import ValidityReport

    target = _load(cfg.target, cfg.backend)
    items = _known_items(cfg, target)
    probe, tune, ev = split_items(items[:cfg.n_facts] if cfg.n_facts else items, seed=cfg.eval_seed)
    recipe = TruthScoresConfig(**cfg.probe_kwargs())
    if cfg.score_source in ("self", cfg.target):
        source, scores = "self", None
    else:  # another model's map on the same probe facts (a base model's gating its descendant: the paper's headline)
        source = cfg.score_source
        src = _load(cfg.score_source, cfg.backend)
        scores = probe_map(src, probe, config=recipe, seed=cfg.data_seed)
        del src
    res = facts_gating(target, probe, tune, ev, scores=scores, score_source=source, probe_config=recipe,
                       alphas=cfg.facts_alphas(), alpha_ranges=cfg.facts_ranges(),
                       allow_out_of_range=cfg.allow_out_of_range, select_by=cfg.select_by, site=cfg.sites[0],
                       rebase=cfg.rebase, n_maps=cfg.n_maps, n_null_replies=cfg.n_null_replies, seed=cfg.data_seed,
                       max_new_tokens=cfg.max_new_tokens, progress=print)
    run.save_result("facts_gating", res)
    report = ValidityReport.of(gating_verdicts(res))
    run.save_result("validity", report)
    print(report.render())
    run.save_json("summary", {"target": cfg.target, "data": WORLD_FACTS, **res.summary(),
                              "verdicts": report.outcomes})
    for name in ("tune", "eval", "diff", "fluency", "replies"):
        run.save_table(name, getattr(res, name))
    if res.gated:
        g = res.eval[res.eval["readout"] == "forced_choice"].set_index("condition")["rate"]
        save_figure(run, "null", F.null_histogram(res.null, float(g["gated"]), res.p, statistic="context rate "
                                                  "(forced choice)", title="Gated vs within-layer shuffled maps "
                                                  "(eval split)"), cfg.figure_formats)
