"""Edits of patching grids and attribution (the lenses use them; defined here with every other edit):

- CellPatch: row r of a batch gets the other run's activation at the cells its mask selects, so one forward patches
  a different (position, head) cell in every row;
- Interpolate: the integrated-gradients path x + alpha (target - x), one alpha per row;
- GradProbe: x + delta with delta a zero leaf that requires grad, so d metric / d delta = d metric / d x."""
from __future__ import annotations

import torch

from interplab.core.edit import Edit, StepContext

__all__ = ["CellPatch", "Interpolate", "GradProbe"]


class CellPatch(Edit):
    """Row r of the batch gets `source` written in where `mask[r]` is True (a Patch-style edit for patching grids).

    source: [1, p, ...] activations of the other run at this site (same columns as the batch: no padding).
    mask: [B, p] (or [B, p, n_heads] on attn_z: a head-indexed patch). One forward then patches a different
    (position, head) cell in every row."""

    def __init__(self, site: str, source: torch.Tensor, mask: torch.Tensor):
        self.sites = (site,)
        self.source = source
        self.mask = mask

    def apply(self, site, x, ctx: StepContext):
        m = self.mask.to(x.device)
        m = m.reshape(*m.shape, *([1] * (x.ndim - m.ndim)))
        return torch.where(m, self.source.to(device=x.device, dtype=x.dtype), x)

    def __repr__(self):
        return f"CellPatch(site={self.sites[0]!r}, rows={self.mask.shape[0]}, cells={int(self.mask.sum())})"


class Interpolate(Edit):
    """x <- x + alpha[r] * (target - x) in row r: the integrated-gradients path from one run to the other."""

    def __init__(self, site: str, target: torch.Tensor, alphas: torch.Tensor):
        self.sites = (site,)
        self.target = target
        self.alphas = alphas

    def apply(self, site, x, ctx):
        a = self.alphas.to(device=x.device, dtype=x.dtype).reshape(-1, *([1] * (x.ndim - 1)))
        return x + a * (self.target.to(device=x.device, dtype=x.dtype) - x)

    def __repr__(self):
        return f"Interpolate(site={self.sites[0]!r}, steps={self.alphas.numel()})"


class GradProbe(Edit):
    """x <- x + delta with delta a zero leaf tensor that requires grad: d metric / d delta = d metric / d x."""

    def __init__(self, site: str, delta: torch.Tensor):
        self.sites = (site,)
        self.delta = delta

    def apply(self, site, x, ctx):
        return x + self.delta.to(x.dtype)

    def __repr__(self):
        return f"GradProbe(site={self.sites[0]!r})"
