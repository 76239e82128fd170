"""Fine-tuning an existing checkpoint: full fine-tuning, or LoRA (through `peft`) on chosen layers.

    model, tok, result = finetune("zoo:toy-base", data, TrainConfig(steps=200, lr=1e-3),
                                  lora=LoraSpec(r=8, layers=(2, 3)), out_dir="my-ckpt")

With LoRA the adapters are merged into the base weights before saving (`LoraSpec.merge=True`, the default), so
the result is again an ordinary HF checkpoint.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from interplab.core.errors import ConfigError, MissingDependencyError
from interplab.train.config import TrainConfig, TrainResult
from interplab.train.trainer import train

LLAMA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class LoraSpec:
    """LoRA adapters. r: rank. alpha: scaling numerator (scale = alpha / r). dropout: adapter dropout.
    target_modules: module names inside each block (Llama/Qwen2 names by default).
    layers: block indices to adapt (None = all); e.g. (2, 3) for the last two of four ("Late-Stage LoRA").
    merge: merge the adapters into the weights at the end (the saved checkpoint is a plain model)."""

    r: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: tuple[str, ...] = LLAMA_MODULES
    layers: tuple[int, ...] | None = None
    merge: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


def apply_lora(model, spec: LoraSpec):
    """Wrap `model` with peft LoRA adapters per `spec` (only adapter weights stay trainable)."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as err:  # pragma: no cover - peft is a dependency
        raise MissingDependencyError("LoRA fine-tuning needs `pip install peft`") from err
    n_layers = getattr(model.config, "num_hidden_layers", None)
    layers = None
    if spec.layers is not None:
        layers = sorted({int(i) for i in spec.layers})
        if n_layers is not None and (not layers or layers[0] < 0 or layers[-1] >= n_layers):
            raise ConfigError(f"LoRA layers {spec.layers} must be within 0..{n_layers - 1}")
    cfg = LoraConfig(r=spec.r, lora_alpha=spec.alpha, lora_dropout=spec.dropout,
                     target_modules=list(spec.target_modules), layers_to_transform=layers, bias="none",
                     task_type="CAUSAL_LM")
    return get_peft_model(model, cfg)


def _parent_name(parent: Any) -> str | None:
    """What a checkpoint records as its parent: "zoo:NAME" for a zoo organism, else the path given."""
    if not isinstance(parent, (str, Path)):
        return None
    from interplab.models.zoo_dirs import zoo_name_of

    return str(parent) if str(parent).startswith("zoo:") else zoo_name_of(parent) or str(parent)


def load_for_finetune(parent: Any):
    """(model, tokenizer) from a zoo name ("zoo:NAME"), a checkpoint directory, or an already loaded model."""
    from interplab.train.checkpoint import load_checkpoint

    if isinstance(parent, (str, Path)):
        p = str(parent)
        if p.startswith("zoo:"):
            from interplab.models.loading import resolve_checkpoint

            p = resolve_checkpoint(p)[1]
        model, tok = load_checkpoint(p)
        return model, tok
    return parent, None


def finetune(parent: Any, data, config: TrainConfig | None = None, *, lora: LoraSpec | None = None,
             out_dir: str | Path | None = None, tokenizer=None, overwrite: bool = False,
             stop_token_ids: list[int] | None = None, train_info: dict | None = None, **train_kwargs):
    """Fine-tune `parent` (zoo name, directory or model) on `data` (any batch source the trainer accepts).

    Returns (model, tokenizer, TrainResult). With `out_dir` the result is saved as a complete HF checkpoint (the
    training config and LoRA spec in interplab_train.json). Resumable checkpoints go to `out_dir + ".work"`.
    """
    cfg = config or TrainConfig()
    model, tok = load_for_finetune(parent)
    tok = tokenizer or tok
    if lora is not None:
        model = apply_lora(model, lora)
    work = Path(str(out_dir) + ".work") if out_dir is not None else None
    result: TrainResult = train(model, data, cfg, out_dir=work, **train_kwargs)
    if lora is not None and lora.merge:
        model = model.merge_and_unload()
    if out_dir is not None:
        from interplab.train.checkpoint import save_checkpoint

        if tok is None:
            raise ConfigError("saving needs a tokenizer: pass tokenizer= when parent is a model object")
        info = {"train_config": cfg.to_dict(), "lora": lora.to_dict() if lora else None,
                "parent": _parent_name(parent),
                "steps_done": result.steps_done, **(train_info or {})}
        save_checkpoint(model, tok, out_dir, train_info=info, stop_token_ids=stop_token_ids, overwrite=overwrite)
    return model, tok, result
