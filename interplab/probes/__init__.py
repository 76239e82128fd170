"""Probes measure; they never edit the model. One module per method; names are re-exported here lazily so that
`from interplab.probes import truth_scores` imports only that method's module."""
from __future__ import annotations

from interplab.core.lazy import LazyExports

_lazy = LazyExports(__name__)
_export = _lazy.add


_export("pcfg", "pcfg_kl", "parse_probes", "kl_summary", "local_to_global", "lstar_slope",
        "attention_offset_mass", "model_next_logprobs", "PROBE_TARGETS", "construction_mirror", "ConstructionMirror",
        "depth_sweep", "DepthSweep", "probe_study", "ProbeStudy")


_export("crh", "concept_diffs", "concept_acts", "fit_cylinder", "Cylinder", "penalty_vector", "sector_vectors",
        "sector_scan", "penalty_scan", "baseline_scan", "steer_generate", "SectorMap", "PenaltyMap", "PairwiseTest",
        "pairwise_test", "trig_law_scan", "fit_helix", "HelixFit", "GibberishFilter", "TokenSetJudge", "LLMJudge",
        "planted_cylinder", "generate_concept_pairs", "load_concept_menu", "optimise_steering_vectors",
        "spiral_probe", "SteeringVectors", "SpiralProbe")

_export("decodeshare", "collect_decode_states", "collect_decode_states_multi", "collect_prefill_states",
        "shared_subspace", "SharedSubspace", "SharedSubspaceConfig", "null_permutation", "null_rotation", "NullResult",
        "loto_subspaces", "sensitivity_sweep", "planted_factor_states", "match_state_counts", "score_forced_choice",
        "ForcedChoiceScores", "generate_exact_match", "GenerationScores")
_export("stats", "bootstrap_ci", "paired_signflip_test")
_export("decodeshare.subspaces", "orthonormalize", "principal_angles", "subspace_overlap", "energy_ratio", "haar_basis",
        "variance_matched_control", "energy_pool", "alpha_matched_control", "k_matched_control", "steering_overlap",
        "repair_vector")

_export("hyperfit", "participation_ratio", "effective_rank", "CovarianceAccumulator", "layer_geometry",
        "compute_layer_geometry", "LayerGeometryResult", "entropy_matched_temperature", "match_temperature",
        "per_position_matched_temperature", "rank_reordering", "RankReorderingResult", "compare_teacher_forced",
        "static_delta", "generation_metrics", "ttr", "rep_n", "diversity", "distinct_n", "self_bleu", "loop_rate")
_export("next_token", "model_summary", "suggest_prompt", "next_token_report", "NextTokenResult")

_export("truth", "truth_scores", "TruthScores", "TruthScoresConfig", "truth_scores_from_activations",
        "evidence_attention", "lineage_correlation", "lineage_table", "correlation_matrix", "load_released_maps",
        "weight_preservation")


__getattr__, __dir__ = _lazy.hooks(globals())


__all__ = _lazy.names()
