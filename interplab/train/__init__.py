"""Causal-LM training, fine-tuning (full, LoRA on chosen layers, hyperfitting) and checkpoints.

Names are re-exported lazily so importing one trainer does not import every training dependency."""
from __future__ import annotations

import importlib

_EXPORTS: dict[str, str] = {}


def _export(module: str, *names: str) -> None:
    for n in names:
        _EXPORTS[n] = f"interplab.train.{module}"


_export("config", "TrainConfig", "TrainResult")
_export("trainer", "train")
_export("finetune", "finetune", "LoraSpec", "apply_lora")
_export("checkpoint", "save_checkpoint", "load_checkpoint")
_export("evaluate", "exact_match", "task_accuracies")
_export("arch", "ArchConfig", "build_model")
_export("hyperfit", "hyperfit", "late_stage_lora", "full_lora", "early_stage_lora", "HyperfitConfig",
        "HyperfitResult")


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'interplab.train' has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
