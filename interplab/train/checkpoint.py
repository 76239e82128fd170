"""Complete Hugging Face checkpoint directories: save (atomically) and load (validated by
`interplab.models.checkpoints.validate_checkpoint`).

A checkpoint directory holds `config.json`, `generation_config.json`, `model.safetensors`, the tokenizer files
(with `chat_template`), `interplab_train.json` (the training config and recipe that produced it) and
`checksums.json` (sha256 of the weight files). It loads with plain `transformers.AutoModelForCausalLM` /
`AutoTokenizer`; nothing interplab-specific is needed to use it.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Mapping

from interplab.core.errors import ResultsError
from interplab.core.quiet import hf_progress
from interplab.models.checkpoints import CHECKSUMS, sha256_file, validate_checkpoint

TRAIN_INFO = "interplab_train.json"


def save_checkpoint(model, tokenizer, out_dir, *, train_info: Mapping[str, Any] | None = None,
                    stop_token_ids: list[int] | None = None, overwrite: bool = False) -> Path:
    """Save `model` + `tokenizer` as a complete HF directory at `out_dir`.

    Written into a temporary sibling directory and renamed into place, so `out_dir` is either the complete old
    checkpoint or the complete new one. Refuses to replace an existing directory unless `overwrite`.
    stop_token_ids: generation stop ids stored in generation_config (e.g. [<eos>, <|im_end|>] for chat models).
    """
    from interplab.core.io import write_json

    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()) and not overwrite:
        raise ResultsError(f"{out_dir} already exists; pass overwrite=True (CLI: --force) to replace it")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    model = getattr(model, "module", model)
    if stop_token_ids:
        model.generation_config.eos_token_id = list(stop_token_ids)
    if tokenizer.pad_token_id is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    with hf_progress():                       # no "Writing model shards" bar unless INTERPLAB_VERBOSE
        model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    weights = sorted(p.name for p in tmp.glob("*.safetensors"))
    write_json(tmp / CHECKSUMS, {w: sha256_file(tmp / w) for w in weights})
    if train_info is not None:
        write_json(tmp / TRAIN_INFO, dict(train_info))
    if out_dir.exists():
        old = out_dir.parent / f".{out_dir.name}.old{os.getpid()}"
        os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out_dir)
    return out_dir


def load_checkpoint(path, dtype=None, device=None):
    """(model, tokenizer) from a validated checkpoint directory through plain transformers."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = validate_checkpoint(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype or torch.float32)
    if device is not None:
        model = model.to(device)
    model.eval()
    tok = AutoTokenizer.from_pretrained(path)
    return model, tok


def read_train_info(path) -> dict:
    from interplab.core.io import read_json

    f = Path(path) / TRAIN_INFO
    return read_json(f) if f.is_file() else {}
