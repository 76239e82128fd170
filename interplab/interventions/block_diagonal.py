"""Block-diagonal attention: keep each packed sample's attention inside its own segment (the FAST SAE paper's
"differs only in packing" control, spec fast_sae.md T4; `interplab.sae.providers` builds the segments)."""
from __future__ import annotations

import torch

from interplab.core.edit import Edit
from interplab.core.errors import InputError

__all__ = ["BlockDiagonalAttention"]


class BlockDiagonalAttention(Edit):
    """At every layer's post-softmax attention pattern, remove attention across segments and renormalise each
    query row, which equals a -inf mask on the scores before the softmax. With RoPE (relative positions) a packed
    block then computes exactly the per-sample activations ("differs only in packing", spec T4). Models with
    learned absolute positions would also need per-segment position ids (not done here).

    segments: [b, p] segment index per position (see `segment_ids`)."""

    def __init__(self, n_layers: int, segments: torch.Tensor):
        self.sites = tuple(f"attn_pattern.{l}" for l in range(n_layers))
        self.segments = torch.as_tensor(segments)
        self.phases = ("prefill",)

    def apply(self, site, x, ctx):
        seg = self.segments.to(x.device)
        if tuple(seg.shape) != (x.shape[0], x.shape[-1]):
            raise InputError(f"segments {tuple(seg.shape)} do not match the pattern {tuple(x.shape)}")
        same = (seg[:, :, None] == seg[:, None, :]).to(x.dtype)[:, None]
        y = x * same
        return y / y.sum(-1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)

    def __repr__(self):
        return f"BlockDiagonalAttention(n_layers={len(self.sites)}, segments={tuple(self.segments.shape)})"
