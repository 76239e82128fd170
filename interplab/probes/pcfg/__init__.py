"""PCFG parse probes (spec ../shared/methods/pcfg_parse.md; docs/pcfg.md): the distribution match of a model to its
grammar (`pcfg_kl`), layer-wise probes of parse quantities with controls and l*(ℓ) (`parse_probes`), attention at
dyadic offsets and the construction mirror. Every function reads a `LabModel` (`interplab.load_model`, or
`interplab.models.wrap_hf_model` for an in-memory transformers model)."""
from interplab.probes.pcfg.attention import AttentionOffsets, attention_offset_mass
from interplab.probes.pcfg.capture import model_next_logprobs
from interplab.probes.pcfg.construction import ConstructionMirror, construction_mirror
from interplab.probes.pcfg.depth_seeds import DepthSeedSweep, DepthSeedSweepConfig, depth_seed_sweep
from interplab.probes.pcfg.kl import KLSummary, describe_kl_summary, kl_summary, pcfg_kl, position_kl
from interplab.probes.pcfg.parse import (LstarSlope, LstarSplitSlopes, local_to_global, lstar_slope,
                                         lstar_slope_by_split, parse_probes)
from interplab.probes.pcfg.studies import DepthSweep, ProbeStudy, depth_sweep, probe_study
from interplab.probes.pcfg.targets import PROBE_TARGETS

__all__ = ["pcfg_kl", "kl_summary", "position_kl", "describe_kl_summary", "model_next_logprobs", "parse_probes", "local_to_global", "lstar_slope",
           "lstar_slope_by_split", "LstarSlope", "LstarSplitSlopes", "KLSummary",
           "PROBE_TARGETS", "attention_offset_mass", "AttentionOffsets", "construction_mirror", "ConstructionMirror", "depth_sweep",
           "DepthSweep", "probe_study", "ProbeStudy", "DepthSeedSweepConfig", "DepthSeedSweep", "depth_seed_sweep"]
