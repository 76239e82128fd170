"""Controls for hyperfitting (spec methods/hyperfit_geometry.md §4.3; issue 17 part 3): ordinary fine-tuning with
early stopping on the same sequences, token-shuffled sequences, and the weight change ‖ΔW‖ of a fine-tuned model.

* `shuffle_within_windows(seqs, seed)`: the same tokens, permuted within each window (position 0, the BOS token,
  stays first so the input format is unchanged). Hyperfitting on these memorises text without its order.
* `finetune_early_stopping(model, seqs, val_seqs, steps=...)`: the usual recipe (AdamW with weight decay, linear
  warm-up then cosine decay, a held-out loss every epoch) for a fixed step budget; early stopping at the usual
  criterion (the held-out loss has not improved for `patience` evaluations) keeps the best weights. With
  `run_to_end=True` training continues to the full budget and the end weights are kept too (`.final_model`), so the
  same run gives the early-stopped model and the step-matched one.
* `weight_change(base, target)`: Frobenius norm of the parameter difference, total and per block.
"""
from __future__ import annotations

import copy
import re
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from interplab.core.errors import ConfigError, InputError, ShapeError
from interplab.core.result import Result
from interplab.train.hyperfit import (HyperfitConfig, _EpochSource, _resolve_source, _validate, count_trainable,
                                     tokenize_for_training)

__all__ = ["shuffle_within_windows", "FinetuneConfig", "FinetuneResult", "finetune_early_stopping",
           "early_stop_index", "weight_change", "heldout_loss"]


def shuffle_within_windows(seqs: Sequence[Sequence[int]], seed: int = 0, *, keep_first: bool = True) -> list[list[int]]:
    """Each window's tokens in a random order (seeded per call; window i gets its own permutation). keep_first:
    leave position 0 (BOS) in place. The multiset of tokens of every window is unchanged."""
    rng = np.random.default_rng(int(seed))
    out = []
    for s in seqs:
        s = [int(t) for t in s]
        head, body = (s[:1], s[1:]) if keep_first else ([], s)
        out.append(head + [body[j] for j in rng.permutation(len(body))])
    return out


@dataclass
class FinetuneConfig:
    """Ordinary fine-tuning (the usual recipe, not hyperfitting).

    lr: peak learning rate; warmup_frac: linear warm-up over this fraction of the steps, then cosine decay to
    `min_lr_ratio` of the peak at the last step. weight_decay: AdamW decay on >= 2-D non-embedding weights.
    betas: AdamW moments. batch_size, seq_len, grad_clip, seed: as in `HyperfitConfig`.
    patience: stop after this many consecutive held-out evaluations (one per epoch) without an improvement larger
    than `min_delta` nats over the best so far; the best weights are kept. run_to_end: keep training to the full
    budget after the stop point (the result then also has the end weights).
    lora_layers: None = train every parameter; else peft LoRA adapters on these blocks ("last:k", "first:k", "all"
    or indices; rank lora_r, scaling numerator lora_alpha) with everything else frozen, merged back at the end, so
    the control has the same parametrisation as a LoRA-hyperfitted model.
    """

    lr: float = 1e-3
    warmup_frac: float = 0.1
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    batch_size: int = 8
    seq_len: int = 128
    grad_clip: float = 1.0
    seed: int = 0
    patience: int = 3
    min_delta: float = 0.0
    run_to_end: bool = True
    lora_layers: Any = None
    lora_r: int = 16
    lora_alpha: float = 32.0

    def validate(self) -> "FinetuneConfig":
        if self.lr <= 0 or not 0 <= self.warmup_frac < 1 or not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError("need lr > 0, 0 <= warmup_frac < 1 and 0 <= min_lr_ratio <= 1")
        if self.patience < 1 or self.batch_size < 1 or self.seq_len < 2 or self.min_delta < 0:
            raise ConfigError("need patience >= 1, batch_size >= 1, seq_len >= 2 and min_delta >= 0")
        return self


def early_stop_index(val_losses: Sequence[float], patience: int, min_delta: float = 0.0) -> tuple[int, int | None]:
    """(best, stop) indices into a held-out loss sequence. best: the evaluation with the lowest loss up to the stop
    point; stop: the evaluation at which `patience` consecutive evaluations failed to improve on the best by more
    than `min_delta` (None = the criterion never fired)."""
    best, best_val, bad = 0, float("inf"), 0
    for i, v in enumerate(val_losses):
        if v < best_val - min_delta:
            best, best_val, bad = i, float(v), 0
        else:
            bad += 1
            if bad >= patience:
                return best, i
    return best, None


@dataclass
class FinetuneResult(Result):
    """history: one row per epoch {epoch, step, train_loss, val_loss, val_entropy, lr}. best_step: the step whose
    weights were kept (lowest held-out loss before the stop); stop_step: where early stopping fired (None = never
    within the budget); steps: steps actually trained (the budget when `run_to_end`). `.model` (best weights) and
    `.final_model` (end weights) are attached in memory, never saved."""

    config: FinetuneConfig
    history: list[dict] = field(default_factory=list)
    budget_steps: int = 0
    steps: int = 0
    best_step: int = 0
    stop_step: int | None = None
    best_val_loss: float = float("nan")
    initial_val_loss: float = float("nan")
    seconds: float = 0.0
    parent: str = ""
    trainable_params: int = 0

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(self.history)

    @property
    def early_stopped(self) -> bool:
        return self.stop_step is not None


class _Stop(Exception):
    pass


def finetune_early_stopping(model, seqs: Sequence[Sequence[int]], val_seqs: Sequence[Sequence[int]], *, steps: int,
                            config: FinetuneConfig | None = None) -> FinetuneResult:
    """Fine-tune a copy of `model` (LabModel, checkpoint / zoo:NAME or (hf, tokenizer); never in place) on `seqs`
    with the usual recipe for `steps` optimiser steps, evaluating the held-out loss on `val_seqs` after every epoch
    (and once before training). Returns a FinetuneResult with `.model` = the best (early-stopped) weights."""
    from interplab.train.trainer import TrainConfig, train

    cfg = copy.deepcopy(config) if config is not None else FinetuneConfig()
    cfg.validate()
    if steps < 1:
        raise ConfigError(f"steps must be >= 1, got {steps}")
    if not val_seqs:
        raise InputError("early stopping needs held-out sequences (val_seqs)")
    hf, tok, parent = _resolve_source(model)
    if cfg.lora_layers is not None:
        from interplab.train.hyperfit import _n_layers, apply_lora, lora_layer_indices

        torch.manual_seed(cfg.seed)
        hf = apply_lora(hf, lora_layer_indices(cfg.lora_layers, _n_layers(hf)), r=cfg.lora_r, alpha=cfg.lora_alpha)
    trainable = count_trainable(hf)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
    train_ids = tokenize_for_training(tok, seqs, cfg.seq_len)
    val_ids = tokenize_for_training(tok, val_seqs, cfg.seq_len)
    source = _EpochSource(train_ids, cfg.batch_size, pad_id, cfg.seed)
    spe = source.steps_per_epoch
    vcfg = HyperfitConfig(seq_len=cfg.seq_len)  # _validate reads only val_ttr / generation fields from it
    tcfg = TrainConfig(steps=int(steps), lr=cfg.lr, warmup_steps=int(round(cfg.warmup_frac * steps)),
                       min_lr_ratio=cfg.min_lr_ratio, weight_decay=cfg.weight_decay, betas=tuple(cfg.betas),
                       grad_clip=cfg.grad_clip, seed=cfg.seed, log_every=spe, eval_every=spe, progress=False)
    hf.eval()
    v0 = _validate(hf, val_ids, pad_id, vcfg, None)
    history: list[dict] = [{"epoch": 0, "step": 0, "train_loss": float("nan"), "lr": 0.0, **v0}]
    state = {"best": copy.deepcopy(hf.state_dict())}

    def on_log(rec: dict) -> None:
        history.append({"epoch": rec["step"] // spe if rec["step"] % spe == 0 else rec["step"] / spe,
                        "step": rec["step"], "train_loss": rec["loss"], "lr": rec["lr"],
                        "val_loss": rec["val_loss"], "val_entropy": rec["val_entropy"]})
        vals = [h["val_loss"] for h in history]
        best, stop = early_stop_index(vals, cfg.patience, cfg.min_delta)
        if stop is None and best == len(vals) - 1:
            state["best"] = copy.deepcopy(hf.state_dict())
        if stop is not None and "stop" not in state:
            state["stop"] = stop
            if not cfg.run_to_end:
                raise _Stop

    t0 = time.perf_counter()
    try:
        train(hf, source, tcfg, eval_fn=lambda m, step: _validate(m, val_ids, pad_id, vcfg, None), log_fn=on_log,
              desc="finetune")
    except _Stop:
        pass
    seconds = time.perf_counter() - t0
    vals = [h["val_loss"] for h in history]
    best, stop = early_stop_index(vals, cfg.patience, cfg.min_delta)
    final = hf.eval()
    best_model = copy.deepcopy(final)
    best_model.load_state_dict(state["best"])
    if cfg.lora_layers is not None:  # plain HF models again, as a LoRA-hyperfitted model is returned
        final, best_model = final.merge_and_unload(), best_model.merge_and_unload()
    res = FinetuneResult(config=cfg, history=history, budget_steps=int(steps), steps=int(history[-1]["step"]),
                         best_step=int(history[best]["step"]),
                         stop_step=None if stop is None else int(history[stop]["step"]),
                         best_val_loss=float(vals[best]), initial_val_loss=float(vals[0]), seconds=seconds,
                         parent=parent, trainable_params=int(trainable))
    res.model, res.final_model = best_model.eval(), final
    return res


def heldout_loss(hf, seqs: Sequence[Sequence[int]], pad_id: int = 0) -> float:
    """Mean next-token loss (nats per predicted token) of an HF causal LM on token-id sequences (teacher-forced,
    right-padded, padding never counted); the held-out loss the fine-tuning arm early-stops on."""
    was = hf.training
    hf.eval()
    out = _validate(hf, [list(map(int, s)) for s in seqs], pad_id, HyperfitConfig(), None)["val_loss"]
    hf.train(was)
    return float(out)


_BLOCK = re.compile(r"(?:^|\.)(?:layers|h|blocks)\.(\d+)\.")


def _group(name: str) -> str:
    m = _BLOCK.search(name)
    if m:
        return f"block.{int(m.group(1))}"
    low = name.lower()
    if "embed_tokens" in low or "wte" in low or "wpe" in low:
        return "embedding"
    if "lm_head" in low:
        return "unembedding"
    return "final_norm" if "norm" in low or "ln_f" in low else "other"


def weight_change(base, target):
    """‖ΔW‖_F of `target` − `base` (two HF modules or state dicts with the same parameter names and shapes): a
    DataFrame with one row per group (block.i, embedding, unembedding, final_norm, other) and a "total" row;
    columns group, delta_fro, base_fro, rel (= delta_fro / base_fro), n_params. Tied tensors count once."""
    import pandas as pd

    sa = _unique_params(base)
    sb = _unique_params(target)
    if set(sa) != set(sb):
        raise ShapeError(f"the two models have different parameters: {sorted(set(sa) ^ set(sb))[:6]}")
    acc: dict[str, list[float]] = {}
    for name, wa in sa.items():
        wb = sb[name]
        if wa.shape != wb.shape:
            raise ShapeError(f"{name}: shapes {tuple(wa.shape)} and {tuple(wb.shape)} differ")
        d, b = wb.double() - wa.double(), wa.double()
        g = acc.setdefault(_group(name), [0.0, 0.0, 0])
        g[0] += float((d * d).sum())
        g[1] += float((b * b).sum())
        g[2] += wa.numel()
    rows = [{"group": g, "delta_fro": v[0] ** 0.5, "base_fro": v[1] ** 0.5, "n_params": int(v[2])}
            for g, v in sorted(acc.items(), key=lambda kv: _group_order(kv[0]))]
    tot = [sum(v[i] for v in acc.values()) for i in range(3)]
    rows.append({"group": "total", "delta_fro": tot[0] ** 0.5, "base_fro": tot[1] ** 0.5, "n_params": int(tot[2])})
    df = pd.DataFrame(rows)
    df["rel"] = df["delta_fro"] / df["base_fro"].where(df["base_fro"] > 0)
    return df


def _group_order(g: str) -> tuple:
    if g.startswith("block."):
        return (1, int(g.split(".")[1]))
    return ({"embedding": 0, "final_norm": 2, "unembedding": 3}.get(g, 4), 0)


def _unique_params(m) -> dict[str, torch.Tensor]:
    """name -> tensor (CPU), each storage once (tied embeddings / lm_head are one parameter)."""
    if isinstance(m, dict):
        items = m.items()
    else:
        items = m.named_parameters()  # named_parameters already yields a tied tensor once
    out, seen = {}, set()
    for n, p in items:
        t = p.detach()
        key = (t.data_ptr(), tuple(t.shape))
        if key in seen:
            continue
        seen.add(key)
        out[n] = t.cpu()
    return out

