"""Hyperfitting geometry (spec methods/hyperfit_geometry.md; docs/hyperfit.md): per-layer participation ratio of a
base and its hyperfitted descendant (Terminal Expansion), the entropy-matched temperature control, rank reordering
with a logit lens, repetition / diversity metrics of generations, the paper's table and the Late-Stage LoRA k sweep."""
from interplab.probes.hyperfit.controls import (ARMS, ControlsConfig, HyperfitControlsResult, hyperfit_controls,
                                                summarize_controls)
from interplab.probes.hyperfit.evaluation import (EvalConfig, HyperfitEvalResult, TeacherForcedSummary,
                                                  evaluate_settings, teacher_forced_summary)
from interplab.probes.hyperfit.geometry import (CovarianceAccumulator, GeometryReport, GeometryReportConfig,
                                                LayerGeometryConfig, LayerGeometryResult, PairedStatsAccumulator,
                                                compute_layer_geometry, covariance_spectrum, effective_rank,
                                                HEADLINE_ESTIMATOR, pr_leave_one_out,
                                                erank_from_spectrum, geometry_report, layer_geometry,
                                                participation_ratio, pr_from_spectrum, twonn_dimension)
from interplab.probes.hyperfit.inputs import (context_prompts, generate_continuations, heldout_texts, user_texts,
                                              teacher_forced_logits, tokenize_texts)
from interplab.probes.hyperfit.ksweep import KSweepConfig, KSweepResult, k_sweep
from interplab.probes.hyperfit.ranks import (RANK_BINS, RankReorderingConfig, RankReorderingResult,
                                             TeacherForcedComparison, base_ranks_of, compare_teacher_forced,
                                             full_ranks, kendall_tau_b, logit_lens, rank_bins, rank_reordering,
                                             static_delta, token_ranks, topk_kendall_tau,
                                             base_scores_of, text_nll)
from interplab.probes.hyperfit.repetition import (GenerationMetricsConfig, distinct_n, diversity, generation_metrics,
                                                  is_loop, loop_rate, metrics_table, rep_n, self_bleu, ttr, words)
from interplab.probes.hyperfit.verdicts import (controls_verdicts, eval_verdicts, geometry_verdicts,
                                                ksweep_verdicts)
from interplab.probes.hyperfit.temperature import (PerPositionTemperature, TemperatureMatch, entropy, entropy_curve,
                                                   entropy_matched_temperature, match_temperature,
                                                   matched_temperature_from_logits, per_position_matched_temperature,
                                                   per_position_temperature_from_logits)

__all__ = [
    "participation_ratio", "effective_rank", "pr_from_spectrum", "erank_from_spectrum", "covariance_spectrum",
    "twonn_dimension", "CovarianceAccumulator", "PairedStatsAccumulator", "LayerGeometryConfig", "LayerGeometryResult",
    "compute_layer_geometry", "layer_geometry", "GeometryReportConfig", "GeometryReport", "geometry_report",
    "heldout_texts", "user_texts", "tokenize_texts", "teacher_forced_logits", "context_prompts",
    "generate_continuations",
    "entropy", "entropy_curve", "matched_temperature_from_logits", "per_position_temperature_from_logits",
    "entropy_matched_temperature", "match_temperature", "TemperatureMatch", "per_position_matched_temperature",
    "PerPositionTemperature",
    "token_ranks", "full_ranks", "kendall_tau_b", "topk_kendall_tau", "rank_bins", "RANK_BINS",
    "TeacherForcedComparison", "compare_teacher_forced", "static_delta", "logit_lens", "base_ranks_of",
    "RankReorderingConfig", "RankReorderingResult", "rank_reordering",
    "ttr", "rep_n", "diversity", "distinct_n", "self_bleu", "is_loop", "loop_rate", "generation_metrics",
    "GenerationMetricsConfig", "metrics_table", "words",
    "EvalConfig", "HyperfitEvalResult", "evaluate_settings", "teacher_forced_summary", "TeacherForcedSummary",
    "eval_verdicts", "geometry_verdicts", "controls_verdicts", "ksweep_verdicts",
    "pr_leave_one_out",
    "base_scores_of", "text_nll", "HEADLINE_ESTIMATOR",
    "KSweepConfig", "KSweepResult", "k_sweep", "ARMS", "ControlsConfig", "HyperfitControlsResult", "hyperfit_controls", "summarize_controls",
]
