"""Validation organisms: small Hugging Face checkpoints whose mechanism is planted by construction (weights written
by hand), so that a method's recovery can be scored against a known answer (DESIGN.md "Ground truth").

    truth_scores  PlantedTruthSpec, build_planted_truth_organism, perturb_checkpoint, planted_truth_items,
                  planted_conflict_items: designated evidence heads carry the context-vs-candidate verdict
"""
from interplab.zoo.validation.truth_scores import (PlantedTruthSpec, build_planted_truth_organism, load_planted_truth,
                                                   perturb_checkpoint, planted_conflict_items, planted_truth_items)

__all__ = ["validation_organism", "validation_kinds", "PlantedTruthSpec", "build_planted_truth_organism", "load_planted_truth", "perturb_checkpoint",
           "planted_truth_items", "planted_conflict_items"]


def validation_kinds() -> list[str]:
    """The methods that declare a validation organism (`MethodSpec.validation_organism`), in methods() order."""
    from interplab.methods import methods

    return [m.name for m in methods() if m.validation_organism]


def validation_organism(method: str, path=None):
    """The checkpoint directory of `method`'s validation organism, built by its declared builder when `path` (default
    `$INTERPLAB_HOME/validation-organisms/<method>`) holds none yet; builds are deterministic, so a finished one is
    reused."""
    from pathlib import Path

    from interplab.core.errors import ConfigError
    from interplab.methods import get_method, resolve
    from interplab.models.zoo_dirs import interplab_home

    spec = get_method(method)
    if not spec.validation_organism:
        raise ConfigError(f"method {method!r} declares no validation organism; those that do: {validation_kinds()}")
    path = Path(path) if path is not None else interplab_home() / "validation-organisms" / method
    if not (path / "planted_truth.json").exists():
        resolve(spec.validation_organism)(path)
    return path
