"""FAST (finetuning-aligned sequential training) SAEs on SAELens: activation providers, training, evaluation, GSNR,
feature statistics for the browser and SAE feature steering. See docs/sae.md."""
from interplab.sae.providers import (ActivationProvider, BlockDiagonalAttention, BlockProvider, Chunk, FastProvider,
                                     block_provider, fast_provider, mixed_batches, pack_blocks, segment_ids)
from interplab.sae.training import (ARCHITECTURES, SAETrainConfig, build_training_sae, geometric_median,
                                    load_train_info, load_training_log, train_sae)
from interplab.sae.evals import ReconstructionAccumulator, evaluate_sae, next_token_ce, response_masks
from interplab.sae.gsnr import GSNRAccumulator, gsnr, sae_gradients, to_training_sae
from interplab.sae.features import FeatureStats, FeatureStatsConfig, feature_statistics
from interplab.sae.steering import (SAESplice, SAESteer, SteeringSweepConfig, SteeringSweepResult, steering_sweep,
                                    template_token_ids)
from interplab.sae.dedup import dedup_ngrams
from interplab.sae._util import assistant_token_mask, hook_name_to_site, load_sae, site_to_hook_name

__all__ = [
    "ActivationProvider", "BlockDiagonalAttention", "BlockProvider", "Chunk", "FastProvider", "block_provider",
    "fast_provider", "mixed_batches", "pack_blocks", "segment_ids", "ARCHITECTURES", "SAETrainConfig",
    "build_training_sae", "geometric_median", "load_train_info", "load_training_log", "train_sae",
    "ReconstructionAccumulator", "evaluate_sae", "next_token_ce", "GSNRAccumulator", "gsnr", "sae_gradients",
    "to_training_sae", "FeatureStats", "FeatureStatsConfig", "feature_statistics", "SAESplice", "SAESteer",
    "SteeringSweepConfig", "SteeringSweepResult", "steering_sweep", "template_token_ids", "dedup_ngrams", "hook_name_to_site",
    "load_sae", "site_to_hook_name", "assistant_token_mask", "response_masks",
]
