"""CRH (the Cylindrical Representation Hypothesis, spec methods/crh.md): cylinder geometry of concept difference
vectors, penalty and sector steering, the implication tests and the spiral probe.

Model-free: `cylinder` (fit against the LRH null), `sectors` (steering vectors, grids, metrics,
SectorMap / PenaltyMap), `implications` (Implication-3 pairwise test, Implication-2 trig-law scan),
`helix` (helix fit of a steering trajectory), `synthetic` (planted-cylinder generator + oracle),
`judges`. Through a `LabModel`: `diffs` (concept difference vectors), `steering` (batched steered
generation, sector / penalty scans), `baselines`, `pairs` (the paper's concept data pipeline),
`real_data` (pair files and offline pairs on real chat models), `toy` (toy-organism concept data),
`spiral` (steering-vector optimisation + helix fits), `elicitation` (concept and fluency rates of a
study's replies). `study`: the synthetic and model studies behind the `crh-*` experiments.
`selection`: the read position, block and strength chosen on held-out concepts; `verdicts`: a run's
claims and their validity checks (issue 46)."""
from __future__ import annotations

from interplab.probes.crh.baselines import (BaselineCurves, baseline_scan, diffmean_direction, pca_direction,
                                            probe_direction)
from interplab.probes.crh.cylinder import (Cylinder, angle_between, circular_mean, fit_cylinder,
                                           lrh_null_plane_explained, max_principal_angle, procrustes_2d, wrap_angle)
from interplab.probes.crh.diffs import concept_acts, concept_acts_by_layer, concept_diffs, concept_diffs_by_layer
from interplab.probes.crh.helix import (HELIX_MODES, HelixConfig, HelixFit, HelixFits, fit_helix, planted_helix,
                                        planted_line)
from interplab.probes.crh.implications import (PairwiseTest, TrigLawScan, pairwise_test, steerability_slope,
                                               trig_law_scan)
from interplab.probes.crh.judges import (CONCEPT, GIBBERISH, LABEL_NAMES, NORMAL, GibberishFilter, LLMJudge,
                                         TokenSetJudge, check_labels)
from interplab.probes.crh.pairs import ConceptPairs, generate_concept_pairs, load_concept_menu
from interplab.probes.crh.sectors import (PenaltyMap, SectorMap, activation_auc, activation_margin, first_activation,
                                          penalty_grid, penalty_vector, sector_angles, sector_centre, sector_vector,
                                          sector_vectors,
                                          strength_grid, suppress_centre)
from interplab.probes.crh.spiral import (SpiralProbe, SteeringVectors, budget_grid, first_difference,
                                         optimise_steering_vectors, spiral_probe)
from interplab.probes.crh.elicitation import elicitation_frame, elicitation_summary, fluency_threshold
from interplab.probes.crh.real_data import real_spiral_prompts, user_concept_data
from interplab.probes.crh.steering import (SteerRun, continuation_nll, penalty_scan, reply_nll, sector_scan,
                                           steer_generate, truncate_at)
from interplab.probes.crh.study import (ConceptSteering, ConceptStudy, ConceptStudyConfig, SyntheticStudy,
                                        SyntheticStudyConfig, residual_unit, run_concept_study, synthetic_study)
from interplab.probes.crh.selection import ReadChoice, choose_read, in_sample_choice, split_concepts
from interplab.probes.crh.verdicts import crh_verdicts, spiral_verdicts
from interplab.probes.crh.synthetic import (SECTOR_MODES, PlantedCylinder, PlantedCylinderConfig, planted_cylinder,
                                            synthetic_penalty_map, synthetic_sector_map)
from interplab.probes.crh.toy import (SPIRAL_DEFAULT_PAIR, ConceptData, model_format, toy_concept_data,
                                      toy_spiral_prompts)

__all__ = [
    # geometry (model-free)
    "Cylinder", "fit_cylinder", "lrh_null_plane_explained", "procrustes_2d", "circular_mean", "wrap_angle",
    "angle_between", "max_principal_angle", "penalty_vector", "sector_vector", "sector_vectors", "sector_angles",
    "strength_grid", "penalty_grid", "first_activation", "activation_margin", "activation_auc", "sector_centre",
    "suppress_centre", "SectorMap", "PenaltyMap", "PairwiseTest", "pairwise_test", "steerability_slope", "TrigLawScan", "trig_law_scan",
    # through a model
    "concept_acts", "concept_acts_by_layer", "concept_diffs", "concept_diffs_by_layer", "steer_generate", "SteerRun",
    "truncate_at", "sector_scan", "penalty_scan", "continuation_nll", "reply_nll",
    "baseline_scan", "BaselineCurves", "diffmean_direction", "pca_direction", "probe_direction",
    "load_concept_menu", "generate_concept_pairs", "ConceptPairs", "ConceptData", "model_format", "toy_concept_data",
    "toy_spiral_prompts", "SPIRAL_DEFAULT_PAIR", "user_concept_data", "real_spiral_prompts",
    # real-model steering: does it elicit, and does the model still speak
    "elicitation_frame", "elicitation_summary", "fluency_threshold",
    # helix and spiral probe
    "HelixConfig", "HelixFit", "HelixFits", "HELIX_MODES", "fit_helix", "planted_helix", "planted_line",
    "optimise_steering_vectors", "spiral_probe", "SteeringVectors", "SpiralProbe", "first_difference", "budget_grid",
    # judges, synthetic organism
    "GibberishFilter", "TokenSetJudge", "LLMJudge", "check_labels", "NORMAL", "CONCEPT", "GIBBERISH", "LABEL_NAMES",
    "PlantedCylinderConfig", "PlantedCylinder", "planted_cylinder", "synthetic_sector_map", "synthetic_penalty_map",
    "SECTOR_MODES",
    # studies
    "SyntheticStudyConfig", "SyntheticStudy", "synthetic_study", "ConceptStudyConfig", "ConceptSteering",
    "ConceptStudy", "run_concept_study", "residual_unit",
    # issue 46: settings chosen on held-out concepts, and the verdicts of a run
    "ReadChoice", "split_concepts", "choose_read", "in_sample_choice", "crh_verdicts",
    "spiral_verdicts",
]
