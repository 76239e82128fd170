"""Causal-LM training, fine-tuning (full, LoRA on chosen layers, hyperfitting) and checkpoints.

Names are re-exported lazily so importing one trainer does not import every training dependency."""
from __future__ import annotations

from interplab.core.lazy import LazyExports

_lazy = LazyExports(__name__)
_export = _lazy.add


_export("config", "TrainConfig", "TrainResult")
_export("trainer", "train")
_export("finetune", "finetune", "LoraSpec", "apply_lora")
_export("checkpoint", "save_checkpoint", "load_checkpoint")
_export("evaluate", "exact_match", "task_accuracies")
_export("arch", "ArchConfig", "build_model")
_export("hyperfit", "hyperfit", "late_stage_lora", "full_lora", "early_stage_lora", "HyperfitConfig",
        "HyperfitResult")


__getattr__, __dir__ = _lazy.hooks(globals())


__all__ = _lazy.names()
