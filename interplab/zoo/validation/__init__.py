"""Validation organisms: small Hugging Face checkpoints whose mechanism is planted by construction (weights written
by hand), so that a method's recovery can be scored against a known answer (DESIGN.md "Ground truth").

    truth_scores  PlantedTruthSpec, build_planted_truth_organism, perturb_checkpoint, planted_truth_items,
                  planted_conflict_items: designated evidence heads carry the context-vs-candidate verdict
"""
from interplab.zoo.validation.truth_scores import (PlantedTruthSpec, build_planted_truth_organism, load_planted_truth,
                                                   perturb_checkpoint, planted_conflict_items, planted_truth_items)

__all__ = ["PlantedTruthSpec", "build_planted_truth_organism", "load_planted_truth", "perturb_checkpoint",
           "planted_truth_items", "planted_conflict_items"]
