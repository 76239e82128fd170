"""Gradient signal-to-noise ratio (GSNR) of SAE parameters (Liu et al. 2020 estimator; method spec §2.3).

For a frozen SAE θ, draw M independent mini-batches of B tokens from an activation source, take the gradient g^(m)
of the full training loss (MSE + sparsity term at the given coefficient, before clipping), and per parameter
coordinate j compute r_j = mean_m(g_j)^2 / (unbiased var_m(g_j) + eps). Report the mean and median of r_j per
parameter tensor and the global mean over all coordinates. Mini-batch GSNR = B x per-sample GSNR, so B must be fixed
across the methods being compared."""
from __future__ import annotations

from typing import Any, Iterator, Mapping

import torch

from interplab.core.errors import ConfigError, DataError, ShapeError


class GSNRAccumulator:
    """Streaming (Welford, float64) mean / variance of gradient samples per named tensor."""

    def __init__(self, eps: float = 1e-30):
        self.eps = eps
        self.n = 0
        self.mean: dict[str, torch.Tensor] = {}
        self.m2: dict[str, torch.Tensor] = {}

    def update(self, grads: Mapping[str, torch.Tensor]) -> None:
        if self.mean and set(grads) != set(self.mean):
            raise ShapeError(f"gradient names changed: {sorted(grads)} vs {sorted(self.mean)}")
        self.n += 1
        for k, g in grads.items():
            g = g.detach().double().reshape(-1).cpu()
            if k not in self.mean:
                self.mean[k] = torch.zeros_like(g)
                self.m2[k] = torch.zeros_like(g)
            if g.shape != self.mean[k].shape:
                raise ShapeError(f"gradient {k!r} changed shape: {tuple(g.shape)} vs {tuple(self.mean[k].shape)}")
            d = g - self.mean[k]
            self.mean[k] += d / self.n
            self.m2[k] += d * (g - self.mean[k])

    def ratios(self) -> dict[str, torch.Tensor]:
        """Per-coordinate r_j for every tensor (float64, flattened)."""
        if self.n < 2:
            raise DataError(f"GSNR needs at least 2 gradient samples, got {self.n}")
        return {k: self.mean[k] ** 2 / (self.m2[k] / (self.n - 1) + self.eps) for k in self.mean}

    def to_frame(self):
        import pandas as pd

        r = self.ratios()
        rows = [{"tensor": k, "mean": float(v.mean()), "median": float(v.median()), "n_coords": v.numel(),
                 "n_batches": self.n} for k, v in r.items()]
        allr = torch.cat(list(r.values()))
        rows.append({"tensor": "global", "mean": float(allr.mean()), "median": float(allr.median()),
                     "n_coords": allr.numel(), "n_batches": self.n})
        return pd.DataFrame(rows)


def to_training_sae(sae: Any):
    """A TrainingSAE with the same weights (needed for the training loss). Inference SAEs are converted using the
    training details stored in their metadata (BatchTopK SAEs, saved as JumpReLU, become JumpReLU training SAEs)."""
    from sae_lens import TrainingSAE

    if isinstance(sae, TrainingSAE):
        return sae
    from sae_lens.registry import get_sae_training_class

    d = sae.cfg.to_dict()
    arch = d["architecture"]
    md = d.get("metadata") or {}
    details = dict(md.get("training_architecture_details") or {}) if md.get("training_architecture") == arch else {}
    cls, cfg_cls = get_sae_training_class(arch)
    from dataclasses import fields as dfields

    names = {f.name for f in dfields(cfg_cls)}
    kw = {k: v for k, v in {**d, **details}.items() if k in names and k != "metadata"}
    tcfg = cfg_cls(**kw)
    tsae = cls(tcfg)
    state = {k: v.detach().clone() for k, v in sae.state_dict().items()}
    tsae.load_state_dict(state, strict=False)
    tsae.cfg.metadata = sae.cfg.metadata
    return tsae


def sae_gradients(sae: Any, batch: torch.Tensor, coefficients: Mapping[str, float] | None = None,
                  n_training_steps: int = 10**9) -> dict[str, torch.Tensor]:
    """Gradients of SAELens's training loss on one batch (no clipping, no optimiser step). Coefficients default
    to their final (post-warm-up) values."""
    from sae_lens.saes.sae import TrainCoefficientConfig, TrainStepInput

    tsae = to_training_sae(sae)
    if coefficients is None:
        coefficients = {k: (v.value if isinstance(v, TrainCoefficientConfig) else float(v))
                        for k, v in tsae.get_coefficients().items()}
    if batch.ndim != 2 or batch.shape[1] != tsae.cfg.d_in:
        raise ShapeError(f"batch must be [n, {tsae.cfg.d_in}], got {tuple(batch.shape)}")
    tsae.train()
    tsae.zero_grad(set_to_none=True)
    out = tsae.training_forward_pass(TrainStepInput(sae_in=batch.to(tsae.device, tsae.dtype),
                                                    coefficients=dict(coefficients), dead_neuron_mask=None,
                                                    n_training_steps=n_training_steps, is_logging_step=False))
    out.loss.backward()
    grads = {n: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p))
             for n, p in tsae.named_parameters()}
    tsae.zero_grad(set_to_none=True)
    return grads


def gsnr(sae: Any, provider: Any, *, n_batches: int = 32, batch_tokens: int = 128,
         buffer_tokens: int | None = None, mix_fraction: float = 0.5, seed: int = 0,
         coefficients: Mapping[str, float] | None = None, eps: float = 1e-30):
    """GSNR per SAE parameter tensor -> DataFrame[tensor, mean, median, n_coords, n_batches] (+ a "global" row).

    provider: anything iterable over [n, d] activation chunks (fast_provider / block_provider, ideally with
    repeat=True) or an iterator of ready [batch_tokens, d] batches. Batches are drawn through SAELens's
    `mixing_buffer` (seeded) so consecutive batches are not from the same sequence, exactly as in training."""
    if n_batches < 2:
        raise ConfigError(f"n_batches must be >= 2, got {n_batches}")
    from interplab.sae.providers import mixed_batches

    import copy

    tsae = copy.deepcopy(to_training_sae(sae))  # SAELens projects JumpReLU thresholds in the forward: work on a copy
    batches: Iterator[torch.Tensor] = mixed_batches(provider, batch_tokens=batch_tokens,
                                                    buffer_tokens=buffer_tokens or 8 * batch_tokens,
                                                    mix_fraction=mix_fraction, seed=seed)
    acc = GSNRAccumulator(eps=eps)
    try:
        for _ in range(n_batches):
            try:
                b = next(batches)
            except StopIteration:
                raise DataError(f"the provider ran out after {acc.n} of {n_batches} batches; use repeat=True") from None
            acc.update(sae_gradients(tsae, b, coefficients))
    finally:
        batches.close()
    return acc.to_frame()
