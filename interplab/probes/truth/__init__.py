"""Truth Scores (TruthProbe): per-head probes of context truthfulness, their inheritance along model lineages,
weight preservation, evidence attention and the gating sweep. Spec: docs/truth_scores.md.

    scores      TruthScores, truth_scores(model, dataset), truth_scores_from_activations(X, y), evidence_attention
    probe_core  fit_head_probes: every (fold, layer, head) logistic probe as one batched program
    lineage     lineage_correlation, correlation_matrix, lineage_table, load_released_maps
    weights     weight_preservation (per-head W_Q/W_K/W_V/W_O and QK/OV cosines)
    data        CtxMem verification / counterfactual sets, context_following
    analysis    evidence_summary, gating_sweep, verification_accuracy, head_ablation_effects
    studies     released_lineage, score_organism, lineage_study, gating_study and their typed results
    directions  truth_probe_directions: a head probe's weight written through W_O as a residual direction
    facts_map   the map on counterfactual world facts with its label-permutation null (real models)
    map_stats   the balanced metric's statistics with the fact as the unit (intervals, held-out best head, effects)
    map_verdicts  the map and lineage verdicts with their validity checks (issue 46)
    drift       how far a descendant moved from its base (weights, next-token KL)
"""
from interplab.probes.truth.analysis import (binomial_ci, evidence_summary, gating_sweep, head_ablation_effects,
                                             verification_accuracy)
from interplab.probes.truth.data import (ContextFollowing, context_following, ctxmem_counterfactual_set,
                                         ctxmem_truth_set, user_truth_set)
from interplab.probes.truth.directions import TruthProbeDirections, truth_probe_directions
from interplab.probes.truth.lineage import (RELEASED_PAIRS, STATISTICS, LineageCorrelation, correlation_matrix,
                                            lineage_correlation, lineage_table, load_released_maps,
                                            per_layer_correlation, released_dir, topk_jaccard,
                                            within_layer_permutations)
from interplab.probes.truth.probe_core import ProbeFit, fit_head_probes, kfold_splits, stratified_splits
from interplab.probes.truth.scores import (TruthScores, TruthScoresConfig, capture_head_outputs, evidence_attention,
                                           truth_scores, truth_scores_from_activations)
from interplab.probes.truth.studies import (SHIPPED_GATES, GatingSweep, LineageStudy, OrganismScores, ProbeRecipe,
                                            ReleasedLineage, gating_study, lineage_study, released_lineage,
                                            score_organism)
from interplab.probes.truth.weights import WP_COLUMNS, preservation_vs_score_change, weight_preservation

__all__ = [
    "TruthScores", "TruthScoresConfig", "truth_scores", "truth_scores_from_activations", "capture_head_outputs",
    "evidence_attention", "TruthProbeDirections", "truth_probe_directions",
    "ProbeFit", "fit_head_probes", "kfold_splits", "stratified_splits",
    "RELEASED_PAIRS", "STATISTICS", "lineage_correlation", "LineageCorrelation", "per_layer_correlation",
    "correlation_matrix",
    "lineage_table", "topk_jaccard", "within_layer_permutations", "load_released_maps", "released_dir",
    "WP_COLUMNS", "weight_preservation", "preservation_vs_score_change",
    "ctxmem_truth_set", "ctxmem_counterfactual_set", "context_following", "ContextFollowing", "user_truth_set",
    "evidence_summary", "binomial_ci", "gating_sweep", "verification_accuracy", "head_ablation_effects",
    "ProbeRecipe", "SHIPPED_GATES", "ReleasedLineage", "released_lineage", "OrganismScores", "score_organism",
    "LineageStudy", "lineage_study", "GatingSweep", "gating_study",
]
