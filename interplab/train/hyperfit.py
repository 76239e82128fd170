"""Hyperfitting (Carlsson et al. 2025) and Late-Stage LoRA (Li et al. 2026) on top of interplab's trainer.

`hyperfit(model, texts, ...)` fine-tunes a causal LM to near-zero training loss on a handful of sequences: Adam
(AdamW with weight decay 0), constant learning rate, stop when the epoch-mean training loss drops below `stop_loss`
nats (cap `max_epochs`). `method="lora"` freezes the model and trains peft LoRA adapters on the projection layers of
chosen blocks (Late-Stage LoRA = the last k blocks; Full-LoRA = every block; the early-stage control = the first k);
the adapters are merged back (`merge_and_unload`) so the result is an ordinary HF checkpoint.

The loop is `interplab.train.trainer.train` (one trainer for the whole project): a step-indexed batch source that
reshuffles every epoch, `log_every = steps_per_epoch` so each log record's loss is the epoch mean, and a stop signal
raised from the log callback when the epoch mean is below `stop_loss`.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Sequence

import numpy as np
import torch

from interplab.core.errors import ConfigError, InputError
from interplab.core.result import Result

__all__ = [
    "HyperfitConfig", "HyperfitResult", "hyperfit", "late_stage_lora", "full_lora", "early_stage_lora",
    "lora_target_modules", "lora_layer_indices", "apply_lora", "count_trainable", "expected_lora_params",
    "tokenize_for_training",
]

RESULT_DIR = "hyperfit"  # the saved HyperfitResult's folder inside a hyperfitted checkpoint
_LLAMA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_GPT2_TARGETS = ("c_attn", "c_proj", "c_fc")


@dataclass
class HyperfitConfig:
    """Hyperfitting / LoRA fine-tuning settings (saved with every result and checkpoint).

    method: "full" (all parameters) or "lora" (peft adapters on `lora_layers`, everything else frozen).
    stop_loss: stop at the end of the first epoch whose mean training loss is below this (nats).
    max_epochs: cap on epochs. lr: constant learning rate (Adam, no warm-up, no decay).
    batch_size: sequences per step. seq_len: each text is truncated to this many tokens (BOS included).
    weight_decay: 0 as in both papers (torch's AdamW default of 0.01 is NOT used). betas/eps: Adam moments.
    grad_clip: global gradient-norm clip (0 = off). seed: shuffling and init seed.
    lora_layers: block indices that get adapters ("last:k", "first:k", "all", or a list of ints); only with
        method="lora". lora_r, lora_alpha, lora_dropout: adapter rank, scaling numerator (scale = alpha / r), dropout.
    target_modules: projection module names (None = attention q/k/v/o and MLP gate/up/down for Llama-style models,
        c_attn/c_proj/c_fc for GPT-2).
    val_every: evaluate the held-out loss/entropy (and TTR when `val_ttr`) every N epochs (0 = never).
    val_ttr: also greedily generate `val_new_tokens` tokens from `val_context` tokens of each validation text and
        record the TTR (slow: off by default).
    max_time_s: wall-clock cap. num_threads: torch threads for the run (None = leave as is). progress: tqdm bar.
    """

    method: str = "full"
    stop_loss: float = 0.05
    max_epochs: int = 300
    lr: float = 1e-4
    batch_size: int = 8
    seq_len: int = 128
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    grad_clip: float = 1.0
    seed: int = 0
    lora_layers: Any = "last:5"
    lora_r: int = 16
    lora_alpha: float = 32.0
    lora_dropout: float = 0.0
    target_modules: tuple[str, ...] | None = None
    val_every: int = 0
    val_ttr: bool = False
    val_context: int = 32
    val_new_tokens: int = 96
    max_time_s: float | None = None
    num_threads: int | None = None
    progress: bool = False

    def validate(self) -> "HyperfitConfig":
        if self.method not in ("full", "lora"):
            raise ConfigError(f"method must be 'full' or 'lora', got {self.method!r}")
        if self.stop_loss <= 0 or self.max_epochs < 1 or self.lr <= 0 or self.batch_size < 1 or self.seq_len < 2:
            raise ConfigError("need stop_loss > 0, max_epochs >= 1, lr > 0, batch_size >= 1, seq_len >= 2")
        if self.method == "lora" and (self.lora_r < 1 or self.lora_alpha <= 0):
            raise ConfigError("LoRA needs lora_r >= 1 and lora_alpha > 0")
        return self


@dataclass
class HyperfitResult(Result):
    """What a hyperfitting run did.

    history: one row per epoch {epoch, train_loss, (val_loss, val_entropy, ttr)}; converged: the stop rule fired;
    epochs, steps, seconds; trainable_params / total_params; lora_layers (block indices with adapters; [] for full);
    checkpoint: where the merged model was saved (None when not saved); parent: the source model's name or path.
    `model` (not a field, never saved) is the trained (merged) HF model of the run that produced this result."""

    config: HyperfitConfig
    history: list[dict] = field(default_factory=list)
    converged: bool = False
    epochs: int = 0
    steps: int = 0
    seconds: float = 0.0
    trainable_params: int = 0
    total_params: int = 0
    lora_layers: list[int] = field(default_factory=list)
    checkpoint: str | None = None
    parent: str = ""
    model: ClassVar[Any] = None

    @property
    def final_loss(self) -> float:
        return float(self.history[-1]["train_loss"]) if self.history else float("nan")

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(self.history)

    def to_dict(self) -> dict:
        return asdict(self)


# ----------------------------------------------------------------------------------------------------------------
# LoRA helpers
# ----------------------------------------------------------------------------------------------------------------
def _n_layers(hf) -> int:
    cfg = hf.config
    return int(getattr(cfg, "num_hidden_layers", None) or getattr(cfg, "n_layer"))


def lora_target_modules(hf) -> tuple[str, ...]:
    """Default LoRA targets: attention and MLP projections of this architecture."""
    names = {n.rsplit(".", 1)[-1] for n, _ in hf.named_modules()}
    for cand in (_LLAMA_TARGETS, _GPT2_TARGETS):
        found = tuple(t for t in cand if t in names)
        if found:
            return found
    raise ConfigError(f"no known projection modules in {type(hf).__name__}; pass target_modules=[...]")


def _layers_pattern(hf) -> str:
    for n, m in hf.named_modules():
        if isinstance(m, torch.nn.ModuleList) and len(m) == _n_layers(hf):
            return n.rsplit(".", 1)[-1]
    raise ConfigError(f"cannot find the block list of {type(hf).__name__}")


def lora_layer_indices(spec, n_layers: int) -> list[int]:
    """"last:k" -> the last k blocks, "first:k" -> the first k, "all" -> every block, or an explicit list."""
    if isinstance(spec, str):
        s = spec.strip().lower()
        if s == "all":
            return list(range(n_layers))
        kind, _, k = s.partition(":")
        if kind in ("last", "first") and k.isdigit():
            k = int(k)
            if not 1 <= k <= n_layers:
                raise ConfigError(f"k must be in 1..{n_layers}, got {k}")
            return list(range(n_layers - k, n_layers)) if kind == "last" else list(range(k))
        if all(p.strip().isdigit() for p in s.split(",")):
            spec = [int(p) for p in s.split(",")]
        else:
            raise ConfigError(f"lora_layers {spec!r}: use 'last:k', 'first:k', 'all' or a list of block indices")
    out = sorted({int(i) for i in spec})
    if not out or out[0] < 0 or out[-1] >= n_layers:
        raise ConfigError(f"lora_layers {spec!r} must be non-empty indices in 0..{n_layers - 1}")
    return out


def apply_lora(hf, layers: Sequence[int], *, r: int = 16, alpha: float = 32.0, dropout: float = 0.0,
               target_modules: Sequence[str] | None = None):
    """Wrap `hf` with peft LoRA adapters (B = 0 at init, so the output is unchanged) on `target_modules` of the given
    blocks and freeze everything else; a thin layer over `interplab.train.finetune.apply_lora` that picks the
    architecture's projection names (Llama-style or GPT-2)."""
    import warnings

    from interplab.train.finetune import LoraSpec
    from interplab.train.finetune import apply_lora as _apply

    spec = LoraSpec(r=int(r), alpha=float(alpha), dropout=float(dropout),
                    target_modules=tuple(target_modules or lora_target_modules(hf)),
                    layers=tuple(int(i) for i in layers), merge=True)
    with warnings.catch_warnings():  # peft warns that GPT-2's Conv1D needs fan_in_fan_out and then sets it
        warnings.simplefilter("ignore", UserWarning)
        return _apply(hf, spec)


def count_trainable(model) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def expected_lora_params(hf, layers: Sequence[int], r: int, target_modules: Sequence[str] | None = None) -> int:
    """sum over adapted projections of r * (d_in + d_out)."""
    targets = set(target_modules or lora_target_modules(hf))
    pattern = _layers_pattern(hf)
    total = 0
    for name, mod in hf.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if leaf not in targets:
            continue
        parts = name.split(".")
        if pattern not in parts:
            continue
        idx = int(parts[parts.index(pattern) + 1])
        if idx not in layers:
            continue
        w = mod.weight
        total += r * (w.shape[0] + w.shape[1])
    return total


# ----------------------------------------------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------------------------------------------
def tokenize_for_training(tokenizer, texts: Sequence[str], seq_len: int) -> list[list[int]]:
    if isinstance(texts, str):
        texts = [texts]
    if not texts:
        raise InputError("no training texts given")
    out = []
    for t in texts:
        if isinstance(t, str):
            if not t.strip():
                raise InputError("training texts must be non-empty strings")
            ids = tokenizer(t)["input_ids"][:seq_len]
        else:
            ids = [int(x) for x in t][:seq_len]
        if len(ids) < 2:
            raise InputError(f"a training sequence has {len(ids)} tokens; it needs >= 2")
        out.append(list(ids))
    return out


class _EpochSource:
    """Step-indexed batches: epoch e visits every sequence once in a permutation seeded by (seed, e)."""

    def __init__(self, seqs: list[list[int]], batch_size: int, pad_id: int, seed: int):
        self.seqs, self.bs, self.pad, self.seed = seqs, batch_size, pad_id, seed
        self.steps_per_epoch = math.ceil(len(seqs) / batch_size)
        self._perm: dict[int, list[int]] = {}

    def __call__(self, step: int) -> dict:
        epoch, i = divmod(step, self.steps_per_epoch)
        if epoch not in self._perm:
            g = torch.Generator().manual_seed(self.seed * 100003 + epoch)
            self._perm = {epoch: torch.randperm(len(self.seqs), generator=g).tolist()}
        idx = self._perm[epoch][i * self.bs:(i + 1) * self.bs]
        rows = [self.seqs[j] for j in idx]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad, dtype=torch.long)
        att = torch.zeros((len(rows), width), dtype=torch.long)
        for k, r in enumerate(rows):  # right padding: causal attention is exact for the real tokens
            ids[k, :len(r)] = torch.tensor(r)
            att[k, :len(r)] = 1
        return {"input_ids": ids, "attention_mask": att}


class _Converged(Exception):
    pass


@torch.no_grad()
def _validate(hf, seqs: list[list[int]], pad_id: int, cfg: HyperfitConfig, eos_id) -> dict:
    dev = next(hf.parameters()).device
    nll, ent, n = 0.0, 0.0, 0
    for i in range(0, len(seqs), 16):
        rows = seqs[i:i + 16]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        att = torch.zeros_like(ids)
        for k, r in enumerate(rows):
            ids[k, :len(r)] = torch.tensor(r)
            att[k, :len(r)] = 1
        ids, att = ids.to(dev), att.to(dev)
        logits = hf(input_ids=ids).logits[:, :-1].float()
        m = (att[:, :-1] * att[:, 1:]).bool()
        lp = torch.log_softmax(logits[m], -1)
        nll += float(-lp.gather(-1, ids[:, 1:][m][:, None]).sum())
        ent += float(-(lp.exp() * lp).sum())
        n += int(m.sum())
    out = {"val_loss": nll / max(n, 1), "val_entropy": ent / max(n, 1)}
    if cfg.val_ttr:
        ttrs = []
        for r in seqs:
            if len(r) < cfg.val_context:
                continue
            ids = torch.tensor([r[:cfg.val_context]], device=dev)
            x = ids
            for _ in range(cfg.val_new_tokens):  # greedy, no EOS (pinned length), full recompute (tiny models)
                z = hf(input_ids=x).logits[0, -1]
                if eos_id is not None:
                    z[eos_id] = float("-inf")
                x = torch.cat([x, z.argmax().view(1, 1)], 1)
            new = x[0, cfg.val_context:].tolist()
            ttrs.append(len(set(new)) / len(new))
        out["ttr"] = float(np.mean(ttrs)) if ttrs else float("nan")
    return out


def _resolve_source(model):
    """-> (hf model copy to train, tokenizer, parent name). Never trains a caller's model in place."""
    from interplab.models.loading import load_hf_model, load_tokenizer, resolve_checkpoint
    from interplab.models.zoo_dirs import zoo_name_of

    if hasattr(model, "hf_model") and hasattr(model, "tokenizer"):
        # A LabModel's hf_model is wrapped by the backend (TransformerBridge inserts hook modules), so reload the
        # plain weights from its checkpoint directory instead of copying the wrapped module.
        if not getattr(model, "path", None):
            raise InputError(f"{model.name} has no checkpoint path to reload plain weights from; pass the path")
        path = Path(model.path)
        return load_hf_model(path, device="cpu", dtype=torch.float32), load_tokenizer(path), str(model.name)
    if isinstance(model, (str, Path)):
        name, path = resolve_checkpoint(str(model))
        parent = zoo_name_of(path) or str(model)  # a zoo organism is recorded by name, never by this machine's path
        return load_hf_model(path, device="cpu", dtype=torch.float32), load_tokenizer(path), parent
    if isinstance(model, tuple) and len(model) == 2:
        return copy.deepcopy(model[0]), model[1], type(model[0]).__name__
    raise InputError("model must be a LabModel, a checkpoint path / zoo:NAME, or a (hf_model, tokenizer) pair")


def hyperfit(model, texts: Sequence[str], *, stop_loss: float | None = None, max_epochs: int | None = None,
             lr: float | None = None, method: str | None = None, val_texts: Sequence[str] | None = None, out_dir=None,
             config: HyperfitConfig | None = None, device=None, overwrite: bool = False,
             **kwargs) -> HyperfitResult:
    """Hyperfit `model` on `texts` and return a HyperfitResult (the trained HF model is in `.model`).

    model: a LabModel, a checkpoint directory / `zoo:NAME`, or an (hf_model, tokenizer) pair; it is copied, never
    trained in place. texts: the training sequences (strings, or token-id lists), each truncated to `seq_len`.
    out_dir: when given, the merged model is saved there with `interplab.train.checkpoint.save_checkpoint` (an
    ordinary HF checkpoint: config.json, model.safetensors, tokenizer files, interplab_train.json, checksums) plus
    the saved HyperfitResult in `hyperfit/` (config, history, parent); an existing directory is replaced only with
    `overwrite=True`.
    stop_loss (default 0.05 nats), max_epochs (300), lr (1e-4), method ("full") and any other keyword argument set
    HyperfitConfig fields (batch_size, seq_len, lora_layers, lora_r, ...) over `config` (default HyperfitConfig())."""
    from interplab.train.trainer import TrainConfig, train

    cfg = copy.deepcopy(config) if config is not None else HyperfitConfig()
    explicit = {"stop_loss": stop_loss, "max_epochs": max_epochs, "lr": lr, "method": method}
    kwargs = {**{k: v for k, v in explicit.items() if v is not None}, **kwargs}
    for k, v in kwargs.items():
        if not hasattr(cfg, k):
            raise ConfigError(f"unknown hyperfit option {k!r}; valid: {sorted(HyperfitConfig.__dataclass_fields__)}")
        setattr(cfg, k, v)
    cfg.validate()
    if cfg.num_threads:
        torch.set_num_threads(int(cfg.num_threads))
    hf, tok, parent = _resolve_source(model)
    if device is not None:
        hf = hf.to(device)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
    seqs = tokenize_for_training(tok, texts, cfg.seq_len)
    val = tokenize_for_training(tok, val_texts, cfg.seq_len) if val_texts else []
    total_params = sum(p.numel() for p in hf.parameters())
    layers: list[int] = []
    if cfg.method == "lora":
        layers = lora_layer_indices(cfg.lora_layers, _n_layers(hf))
        torch.manual_seed(cfg.seed)
        hf = apply_lora(hf, layers, r=cfg.lora_r, alpha=cfg.lora_alpha, dropout=cfg.lora_dropout,
                        target_modules=cfg.target_modules)
    trainable = count_trainable(hf)
    source = _EpochSource(seqs, cfg.batch_size, pad_id, cfg.seed)
    spe = source.steps_per_epoch
    tcfg = TrainConfig(steps=cfg.max_epochs * spe, lr=cfg.lr, warmup_steps=0, min_lr_ratio=1.0,
                       weight_decay=cfg.weight_decay, betas=tuple(cfg.betas), eps=cfg.eps, grad_clip=cfg.grad_clip,
                       seed=cfg.seed, log_every=spe, eval_every=0, progress=cfg.progress, max_time_s=cfg.max_time_s)
    history: list[dict] = []
    eos_id = tok.eos_token_id

    def on_log(rec: dict) -> None:
        epoch = rec["step"] // spe
        row = {"epoch": epoch, "step": rec["step"], "train_loss": rec["loss"], "lr": rec["lr"],
               "elapsed_s": rec["elapsed_s"]}
        if val and cfg.val_every and (epoch % cfg.val_every == 0 or rec["loss"] < cfg.stop_loss):
            hf.eval()
            row.update(_validate(hf, val, pad_id, cfg, eos_id))
            hf.train()
        history.append(row)
        if rec["loss"] < cfg.stop_loss:
            raise _Converged

    t0 = time.perf_counter()
    converged = False
    try:
        train(hf, source, tcfg, log_fn=on_log, desc=f"hyperfit[{cfg.method}]")
    except _Converged:
        converged = True
    hf.eval()
    if cfg.method == "lora":
        hf = hf.merge_and_unload()
    res = HyperfitResult(config=cfg, history=history, converged=converged, epochs=len(history),
                         steps=(history[-1]["step"] if history else 0), seconds=time.perf_counter() - t0,
                         trainable_params=trainable, total_params=total_params, lora_layers=layers, parent=parent)
    res.model = hf
    if out_dir is not None:
        from interplab.train.checkpoint import save_checkpoint

        out = save_checkpoint(hf, tok, out_dir, overwrite=overwrite, train_info={
            "kind": "hyperfit", "parent": parent, "hyperfit": res.to_dict() | {"checkpoint": None}})
        res.checkpoint = str(out)
        res.save(out / RESULT_DIR)
    return res


def late_stage_lora(model, texts, *, k: int = 5, **kwargs) -> HyperfitResult:
    """LoRA on the last k blocks only (r=16, alpha=32 on attention and MLP projections by default)."""
    return hyperfit(model, texts, method="lora", lora_layers=f"last:{int(k)}", **kwargs)


def full_lora(model, texts, **kwargs) -> HyperfitResult:
    """LoRA on every block (same r/alpha/targets as Late-Stage LoRA)."""
    return hyperfit(model, texts, method="lora", lora_layers="all", **kwargs)


def early_stage_lora(model, texts, *, k: int = 5, **kwargs) -> HyperfitResult:
    """Control: LoRA on the first k blocks only."""
    return hyperfit(model, texts, method="lora", lora_layers=f"first:{int(k)}", **kwargs)
