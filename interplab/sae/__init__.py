"""FAST (finetuning-aligned sequential training) SAEs on SAELens: activation providers, training, evaluation, GSNR,
feature statistics for the browser, SAE feature steering and the FAST vs block comparison. See docs/sae.md."""
from interplab.sae.providers import (ActivationProvider, BlockDiagonalAttention, BlockProvider, Chunk, FastProvider,
                                     block_provider, fast_provider, mixed_batches, pack_blocks, segment_ids)
from interplab.sae.training import (ARCHITECTURES, SAETrainConfig, build_training_sae, geometric_median,
                                    load_train_info, load_training_log, train_sae)
from interplab.sae.evals import (PackedSAEEval, ReconstructionAccumulator, SAEEval, evaluate_sae, evaluate_sae_packed,
                                next_token_ce, response_masks)
from interplab.sae.gsnr import GSNRAccumulator, gsnr, sae_gradients, to_training_sae
from interplab.sae.features import FeatureStats, FeatureStatsConfig, feature_statistics, logit_effects
from interplab.sae.steering import (SAESplice, SAESteer, SteeringSweepConfig, SteeringSweepResult, steering_sweep,
                                    template_token_ids)
from interplab.sae.dedup import dedup_ngrams
from interplab.sae.chat import assistant_token_mask, chat_ids, is_dialogue, special_token_ids, text_ids
from interplab.sae.sites import hook_name_to_site, load_sae, sae_site, site_to_hook_name
from interplab.sae.data import SAEData, generic_dialogues, sae_data, toy_dialogues
from interplab.sae.synthetic import (SyntheticComparison, SyntheticConfig, SyntheticMetrics, compare_with_saelens,
                                     synthetic_data, synthetic_metrics)
from interplab.sae.sequential import SequentialBenchmark, SequentialConfig, SequentialData, sequential_benchmark
from interplab.sae.compare import (METHOD_LABELS, ComparisonConfig, FastVsBlockResult, SAERecipe,
                                   SpecialTokenSteering, fast_vs_block, leakage_table, metrics_row,
                                   special_token_steering, train_one)
from interplab.sae.pareto import ParetoConfig, ParetoResult, sae_pareto

__all__ = [
    "ActivationProvider", "BlockDiagonalAttention", "BlockProvider", "Chunk", "FastProvider", "block_provider",
    "fast_provider", "mixed_batches", "pack_blocks", "segment_ids", "ARCHITECTURES", "SAETrainConfig",
    "build_training_sae", "geometric_median", "load_train_info", "load_training_log", "train_sae",
    "ReconstructionAccumulator", "evaluate_sae", "next_token_ce", "response_masks", "GSNRAccumulator", "gsnr",
    "sae_gradients", "to_training_sae", "FeatureStats", "FeatureStatsConfig", "feature_statistics", "logit_effects",
    "SAESplice", "SAESteer", "SteeringSweepConfig", "SteeringSweepResult", "steering_sweep", "template_token_ids",
    "dedup_ngrams", "assistant_token_mask", "chat_ids", "is_dialogue", "special_token_ids", "text_ids",
    "hook_name_to_site", "load_sae", "sae_site", "site_to_hook_name", "SAEData", "sae_data", "toy_dialogues",
    "generic_dialogues", "METHOD_LABELS", "SAERecipe", "ComparisonConfig", "FastVsBlockResult",
    "SpecialTokenSteering", "fast_vs_block", "leakage_table", "metrics_row", "special_token_steering", "train_one",
    "SyntheticConfig", "SyntheticComparison", "compare_with_saelens", "synthetic_data", "synthetic_metrics",
    "SequentialConfig", "SequentialData", "SequentialBenchmark", "sequential_benchmark",
    "evaluate_sae_packed", "ParetoConfig", "ParetoResult", "sae_pareto", "SAEEval", "PackedSAEEval",
    "SyntheticMetrics",
]
