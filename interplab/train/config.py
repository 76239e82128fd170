"""Training configuration and result dataclasses (no torch import: recipes and the CLI read them cheaply)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

from interplab.core.errors import ConfigError


@dataclass
class TrainConfig:
    """Training hyper-parameters (saved as `interplab_train.json` next to every checkpoint).

    steps: optimiser steps. lr: peak learning rate. warmup_steps: linear warm-up from 0 to lr.
    min_lr_ratio: the cosine decays to lr * min_lr_ratio at `steps` (0.1 = "cosine to 10%").
    weight_decay: AdamW decay on >= 2-D weights except embeddings (norms/biases/embeddings get 0).
    betas, eps: AdamW moments. grad_clip: max global grad norm (0 = off). seed: torch seed for the run (dropout,
    anything random inside the step). checkpoint_every: save a resumable checkpoint every N steps (0 = never; needs
    `out_dir`). keep_checkpoints: how many resumable checkpoints to keep. log_every: record/print cadence.
    eval_every: call `eval_fn(model, step)` every N steps (0 = never). num_threads: torch.set_num_threads for the
    run (None = leave). progress: show a tqdm bar. max_time_s: stop early after this many seconds (the schedule is
    not changed; the result says it stopped early). autocast_bf16: bf16 autocast for the forward (CPU/GPU).
    time_budget_s: a wall-clock budget for the whole schedule. The warm-up/cosine progress is then
        max(step / steps, elapsed / time_budget_s) and training ends when either reaches 1, so a run on a busy
        machine still completes its cosine decay. Not bit-reproducible (depends on speed); the result records the
        steps done. None (default) = the step-based, deterministic schedule.
    """

    steps: int = 1000
    lr: float = 2e-3
    warmup_steps: int = 150
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    grad_clip: float = 1.0
    seed: int = 0
    checkpoint_every: int = 0
    keep_checkpoints: int = 1
    log_every: int = 10
    eval_every: int = 0
    num_threads: int | None = None
    progress: bool = True
    max_time_s: float | None = None
    autocast_bf16: bool = False
    time_budget_s: float | None = None

    def validate(self) -> "TrainConfig":
        if self.steps < 1:
            raise ConfigError(f"steps must be >= 1, got {self.steps}")
        if self.lr <= 0:
            raise ConfigError(f"lr must be > 0, got {self.lr}")
        if self.warmup_steps < 0 or not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError("warmup_steps must be >= 0 and min_lr_ratio in [0, 1]")
        return self

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        if "betas" in kw:
            kw["betas"] = tuple(kw["betas"])
        return cls(**kw)


@dataclass
class TrainResult:
    """losses: the loss of every step (float). log: [{step, loss, lr, tokens_per_s, ...eval}] every log_every
    steps. steps_done, seconds, tokens (non-pad tokens seen), tokens_per_s, stopped_early, resumed_from."""

    losses: list[float] = field(default_factory=list)
    log: list[dict] = field(default_factory=list)
    steps_done: int = 0
    seconds: float = 0.0
    tokens: int = 0
    tokens_per_s: float = 0.0
    stopped_early: bool = False
    resumed_from: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


def lr_lambda(step: float, cfg: TrainConfig) -> float:
    """Multiplier of the peak lr at `step` (0-based; may be fractional under a time budget): warm-up
    (step+1)/warmup, then cosine to min_lr_ratio at cfg.steps."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    span = max(1, cfg.steps - cfg.warmup_steps)
    t = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t))


def _progress_step(step: int, elapsed: float, cfg: TrainConfig) -> float:
    """The schedule position: `step`, or further along when a time budget is running out."""
    if not cfg.time_budget_s:
        return float(step)
    return max(float(step), cfg.steps * min(1.0, elapsed / cfg.time_budget_s))
