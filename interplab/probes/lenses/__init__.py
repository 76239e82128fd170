"""Lenses: activation patching, attribution patching, logit lens (and tuned lens), direct logit attribution,
attention patterns, a dashboard for any direction, the atlas across methods and the lenses over many fact pairs.

Every lens runs through `LabModel.run` (both backends), takes `edits=[...]` applied underneath its own patches, and
returns a typed `Result` with `to_frame()`. See docs/lenses.md."""
from interplab.core.lazy import LazyExports
from interplab.probes.lenses.atlas import (Atlas, AtlasConfig, atlas, direction_overlaps, map_agreement,
                                           planted_checks, span_cos)
from interplab.probes.lenses.atlas_inputs import (AtlasInputs, atlas_inputs, atlas_parts, planted_truth,
                                                  shipped_decoder)
from interplab.probes.lenses.attention import AttentionResult, attention_patterns
from interplab.probes.lenses.attribution import (AttributionConfig, attribution_grid, attribution_patching,
                                                 compare_to_exact)
from interplab.probes.lenses.common import (PATCH_KINDS, CellPatch, FactPair, GradProbe, Interpolate, PromptPair,
                                            default_fact_pair, default_pair, logit_diff_metric, make_pair)
from interplab.probes.lenses.direction_registry import DirectionRegistry, collect_directions, read_sae_decoder
from interplab.probes.lenses.direction import (DirectionDashboard, DirectionDefaults, default_direction,
                                               direction_dashboard)
from interplab.probes.lenses.dla import DLAResult, direct_logit_attribution, frozen_norm
from interplab.probes.lenses.facts import FactLensConfig, FactLensStudy, fact_lens_study, position_roles
from interplab.probes.lenses.logit_lens import LogitLensResult, TunedLens, logit_lens, train_tuned_lens
from interplab.probes.lenses.patching import (PatchingConfig, PatchingResult, PatchingSweep, activation_patching,
                                              patch_grid, patched_generation)

__all__ = ["DirectionRegistry", "collect_directions", "read_sae_decoder", "Atlas", "AtlasConfig", "atlas",
           "direction_overlaps", "layer_participation", "map_agreement", "planted_checks", "span_cos", "AtlasInputs",
           "atlas_inputs", "atlas_parts", "planted_truth", "shipped_decoder",
           "DirectionDashboard", "direction_dashboard", "DirectionDefaults", "default_direction",
           "AttentionResult", "attention_patterns", "default_pair",
           "FactPair", "default_fact_pair",
           "PATCH_KINDS", "CellPatch", "GradProbe", "Interpolate", "PromptPair", "logit_diff_metric", "make_pair",
           "PatchingConfig", "PatchingResult", "PatchingSweep", "activation_patching", "patch_grid",
           "patched_generation", "AttributionConfig", "attribution_grid", "attribution_patching", "compare_to_exact",
           "DLAResult", "direct_logit_attribution", "frozen_norm", "LogitLensResult", "TunedLens", "logit_lens",
           "train_tuned_lens", "FactLensConfig", "FactLensStudy", "fact_lens_study", "position_roles"]


# a method's atlas part provides it (hyperfit's `layer_participation`, reached through the atlas module): resolved on
# first use, so importing the lenses does not import every method
_lazy = LazyExports(__name__)
_lazy.add("atlas", "layer_participation")
__getattr__, __dir__ = _lazy.hooks(globals())
