"""Logit-site edits for the hyperfitting controls.

* `StaticLogitBias(delta, alpha)`: static vocabulary reweighting, z <- z + alpha * delta at every position and decode
  step (spec §2.2 / §4.5). delta [V] is usually `interplab.probes.hyperfit.static_delta(...)`: the mean log-softmax
  change of the hyperfitted model on its top-K most promoted tokens. Adding a vector to raw logits equals adding it to
  log-softmax values (softmax is shift-invariant per position). alpha = 0 is bit-identical to no edit.
* `SuppressTokens(ids)`: set those logits to -inf (HF's min_new_tokens: keeps EOS out so generations have a pinned
  length).
* `LogitTemperature(T)`: z <- z / T (temperature as an edit; greedy decoding is unchanged by it, sampling is not).
"""
from __future__ import annotations

from typing import Sequence

import torch

from interplab.core.errors import InputError, ShapeError
from interplab.core.edit import PHASES, Edit, ModelShape, PositionSpec, StepContext

__all__ = ["StaticLogitBias", "SuppressTokens", "LogitTemperature"]


class StaticLogitBias(Edit):
    """z[..., v] += alpha * delta[v] on the `logits` site."""

    sites = ("logits",)

    def __init__(self, delta, alpha: float = 1.0, *, positions: PositionSpec = "all",
                 phases: Sequence[str] = PHASES):
        delta = torch.as_tensor(delta)
        if delta.ndim != 1:
            raise ShapeError(f"delta must be a vector [vocab]; got shape {tuple(delta.shape)}")
        if not torch.isfinite(delta).all():
            raise InputError("delta contains non-finite values")
        self.delta = delta.detach().float()
        self.alpha = float(alpha)
        self.positions = positions
        self.phases = tuple(phases)
        self._validate_phases()

    def __repr__(self) -> str:
        nz = int((self.delta != 0).sum())
        return (f"StaticLogitBias(alpha={self.alpha:g}, vocab={self.delta.numel()}, nonzero={nz}, "
                f"positions={self.positions!r}, phases={self.effective_phases})")

    def validate(self, shape: ModelShape) -> None:
        if self.delta.numel() != shape.d_vocab:
            raise ShapeError(f"StaticLogitBias: delta has shape [{self.delta.numel()}], but this model needs "
                             f"[d_vocab={shape.d_vocab}]")

    def is_noop(self) -> bool:
        return self.alpha == 0.0 or not bool((self.delta != 0).any())

    def apply(self, site: str, x: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        if x.shape[-1] != self.delta.numel():
            raise ShapeError(f"delta has {self.delta.numel()} entries but the logits have vocab {x.shape[-1]}")
        return x + (self.alpha * self.delta).to(device=x.device, dtype=x.dtype)

    def remote_apply(self, site, ctx):
        bias = (self.alpha * self.delta).detach().cpu()

        def add_bias(x):
            return x + bias.to(device=x.device, dtype=x.dtype)
        return add_bias


class SuppressTokens(Edit):
    """Set the logits of `token_ids` to -inf (they can never be chosen)."""

    sites = ("logits",)

    def __init__(self, token_ids: Sequence[int], *, positions: PositionSpec = "all", phases: Sequence[str] = PHASES):
        self.token_ids = [int(t) for t in token_ids]
        self.positions = positions
        self.phases = tuple(phases)
        self._validate_phases()

    def __repr__(self) -> str:
        return f"SuppressTokens({self.token_ids})"

    def validate(self, shape: ModelShape) -> None:
        bad = [t for t in self.token_ids if not 0 <= t < shape.d_vocab]
        if bad:
            raise ShapeError(f"SuppressTokens: token ids {bad} are outside this model's vocabulary "
                             f"[0, d_vocab={shape.d_vocab})")

    def is_noop(self) -> bool:
        return not self.token_ids

    def apply(self, site: str, x: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        x = x.clone()
        x[..., self.token_ids] = float("-inf")
        return x

    def remote_apply(self, site, ctx):
        ids = list(self.token_ids)

        def suppress(x):
            x = x.clone()
            x[..., ids] = float("-inf")
            return x
        return suppress


class LogitTemperature(Edit):
    """z <- z / T on the `logits` site. T = 1 is bit-identical to no edit."""

    sites = ("logits",)

    def __init__(self, T: float, *, positions: PositionSpec = "all", phases: Sequence[str] = PHASES):
        if not T > 0:
            raise InputError(f"temperature must be > 0, got {T}")
        self.T = float(T)
        self.positions = positions
        self.phases = tuple(phases)
        self._validate_phases()

    def __repr__(self) -> str:
        return f"LogitTemperature({self.T:g})"

    def is_noop(self) -> bool:
        return self.T == 1.0

    def apply(self, site: str, x: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        return x / self.T

    def remote_apply(self, site, ctx):
        T = self.T

        def divide(x):
            return x / T
        return divide
