"""DecodeShare (Shao et al., ICML 2026): a task-shared subspace of decode-time (KV-cached) residual states, its
significance nulls, decode-only removal against prefill-estimated, random and budget-matched controls, patchback
rescue rates, the steering overlap and the stage-aligned steering ranking.

Modules: `estimator` (shared subspace, nulls, LOTO, planted factors), `subspaces` (subspace linear algebra and the
budget controls), `model` (state collection and scoring through `LabModel`), `tasks` (multitask data),
`evaluation` (per-condition accuracy and summaries), `bases` (the ablation conditions), `study` (the intervention
study), `layers` (the layer scan), `steering`, `patchback`, `ranking`, `pools`, `config`."""
from __future__ import annotations

from interplab.probes.decodeshare.bases import Condition, build_bases, matched_prefill_basis, patchback_bases
from interplab.probes.decodeshare.config import DecodeShareConfig, DecodeShareLayersConfig, DecodeShareSetup
from interplab.probes.decodeshare.estimator import (
    NullResult, PlantedFactors, SharedSubspace, SharedSubspaceConfig, loto_subspaces, match_state_counts,
    null_permutation, null_rotation, planted_factor_states, sensitivity_sweep, shared_subspace,
)
from interplab.probes.decodeshare.evaluation import decode_projection, evaluate_condition, summarize
from interplab.probes.decodeshare.layers import LayerScan, scan_layers
from interplab.probes.decodeshare.model import (
    ForcedChoiceScores, GenerationScores, collect_decode_states, collect_decode_states_multi, collect_prefill_states,
    generate_exact_match, resid_site, score_forced_choice, stop_token_ids,
)
from interplab.probes.decodeshare.patchback import PatchbackResult, patchback_controls, patchback_rescue
from interplab.probes.decodeshare.pools import ranking_pool
from interplab.probes.decodeshare.ranking import RankingResult, ranking_metrics, steering_ranking
from interplab.probes.decodeshare.steering import SteeringOverlap, steering_study
from interplab.probes.decodeshare.study import (
    CalibrationStates, DecodeShareStudy, SubspaceEstimate, calibration_states, estimate_subspaces, run_study,
    study_patchback,
)
from interplab.probes.decodeshare.subspaces import (
    AngleSummary, alpha_matched_control, angle_summary, energy_pool, energy_ratio, haar_basis, k_matched_control,
    principal_angles, projector, repair_vector, steering_overlap, subspace_overlap, variance_matched_control,
)
from interplab.probes.decodeshare.tasks import ALL_TASKS, SEQ_TASKS, TaskSet, multitask_sets, resolve_format

__all__ = [
    # estimator
    "SharedSubspaceConfig", "SharedSubspace", "shared_subspace", "NullResult", "null_permutation", "null_rotation",
    "loto_subspaces", "sensitivity_sweep", "PlantedFactors", "planted_factor_states", "match_state_counts",
    # subspaces
    "projector", "principal_angles", "angle_summary", "AngleSummary", "subspace_overlap", "energy_ratio", "haar_basis",
    "variance_matched_control", "energy_pool", "alpha_matched_control", "k_matched_control", "steering_overlap",
    "repair_vector",
    # model
    "resid_site", "collect_decode_states", "collect_decode_states_multi", "collect_prefill_states",
    "ForcedChoiceScores", "score_forced_choice", "GenerationScores", "generate_exact_match", "stop_token_ids",
    # tasks, evaluation, conditions
    "SEQ_TASKS", "ALL_TASKS", "TaskSet", "multitask_sets", "resolve_format", "decode_projection",
    "evaluate_condition", "summarize", "Condition", "build_bases", "matched_prefill_basis", "patchback_bases",
    # studies
    "DecodeShareSetup", "DecodeShareConfig", "DecodeShareLayersConfig", "CalibrationStates", "calibration_states",
    "SubspaceEstimate", "estimate_subspaces", "DecodeShareStudy", "run_study", "study_patchback", "LayerScan",
    "scan_layers", "SteeringOverlap", "steering_study",
    # patchback and ranking
    "PatchbackResult", "patchback_rescue", "patchback_controls", "RankingResult", "steering_ranking",
    "ranking_metrics", "ranking_pool",
]
