"""The typical size of a residual-stream activation, the unit in which steering strengths are given.

A real language model's residual stream holds a few *massive activations* (Sun et al. 2024, "Massive Activations in
Large Language Models"): at the first token and a few delimiter tokens the norm is hundreds of times the median
(SmolLM2-135M-Instruct: ~2.5e4 at the first position against ~10^2 elsewhere). A mean over all positions is then the
massive positions' norm divided by the sequence length, and a strength "in units of the mean norm" swamps every
ordinary position (issue 25 §3: alpha 0.25 on SmolLM2 layer 15 already produced "or or or"). The unit used by every
steering sweep is therefore the mean norm over the *ordinary* positions: those whose norm is at most
`MASSIVE_FACTOR` times the median norm. On an organism without massive positions it is the plain mean.

Shared by the SAE steering sweep and the DecodeShare steering ranking (one definition, `activation_scale`)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from interplab.core.errors import ShapeError

__all__ = ["MASSIVE_FACTOR", "ActivationScale", "activation_scale", "massive_mask"]

# Sun et al. call an activation massive at ~1000x the median magnitude; 10x the median norm separates SmolLM2's and
# Gemma-3's sink positions (>= 100x) from ordinary ones (within ~3x of the median) with a wide margin either side.
MASSIVE_FACTOR = 10.0


@dataclass(frozen=True)
class ActivationScale:
    """typical: mean norm over ordinary positions (the steering unit); median: median norm over all positions;
    mean_all: mean norm over all positions (the old unit, kept for comparison); n: positions; n_massive: positions
    whose norm exceeds MASSIVE_FACTOR x median (left out of `typical`)."""

    typical: float
    median: float
    mean_all: float
    n: int
    n_massive: int

    def as_dict(self) -> dict:
        return {"typical_norm": self.typical, "median_norm": self.median, "mean_norm_all": self.mean_all,
                "n_positions": self.n, "n_massive": self.n_massive}


def activation_scale(acts, *, massive_factor: float = MASSIVE_FACTOR) -> ActivationScale:
    """The scale of activations `acts` ([..., d], numpy or torch): see the module docstring."""
    a = acts.detach().float().cpu().numpy() if hasattr(acts, "detach") else np.asarray(acts)
    if not np.issubdtype(a.dtype, np.floating):
        a = a.astype(np.float64)
    if a.ndim < 1 or a.shape[-1] == 0 or a.size == 0:
        raise ShapeError(f"activation_scale needs activations of shape [..., d] with at least one position; got "
                         f"shape {tuple(a.shape)}")
    if not massive_factor > 1:
        raise ValueError(f"massive_factor must be > 1 (a multiple of the median norm); got {massive_factor}")
    # norms in the input's precision, so a caller that averaged np.linalg.norm before gets the same number
    norms = np.linalg.norm(a.reshape(-1, a.shape[-1]), axis=1)
    med = float(np.median(norms))
    ordinary = norms <= massive_factor * med
    return ActivationScale(typical=float(norms[ordinary].mean()), median=med, mean_all=float(norms.mean()),
                           n=int(norms.size), n_massive=int((~ordinary).sum()))


def massive_mask(acts, massive_factor: float = MASSIVE_FACTOR, real=None):
    """True at the massive positions of torch activations [..., p, d]: norm above `massive_factor` x the median norm
    of the same sequence (the last-but-one axis; a 2-D [n, d] input is one sequence). The rule `activation_scale`
    uses, per sequence, so an SAE can be trained and evaluated without a sequence's attention-sink position.

    real: optional bool [..., p], the positions that count for the median (a padded batch: padding positions can be
    sinks themselves and would otherwise carry the median of a short row up to the sink's norm)."""
    import torch

    if not massive_factor > 1:
        raise ValueError(f"massive_factor must be > 1 (a multiple of the median norm); got {massive_factor}")
    if acts.ndim < 2 or acts.shape[-2] == 0:
        raise ShapeError(f"massive_mask needs activations [..., p, d] with p >= 1; got shape {tuple(acts.shape)}")
    norms = acts.detach().float().norm(dim=-1)
    if real is None:
        med = norms.median(dim=-1, keepdim=True).values
    else:
        real = real.to(norms.device).bool()
        if real.shape != norms.shape:
            raise ShapeError(f"real mask {tuple(real.shape)} must match the positions {tuple(norms.shape)}")
        med = torch.where(real, norms, torch.nan).nanmedian(dim=-1, keepdim=True).values
    return norms > massive_factor * med
