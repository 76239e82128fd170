"""Attribution patching: a gradient estimate of every activation-patching cell from one backward pass.

effect(cell) ~= (a_src - a_base)[cell] . d metric / d a  (at the base run) — Nanda's attribution patching, the
first-order Taylor expansion of the metric around the run that is patched into. The integrated-gradients variant
(EAP-IG, Hanna et al. 2024) averages the gradient over `ig_steps` points on the straight path from the base run's
input embeddings (resid_pre.0) to the source run's, which tightens the estimate where the metric is far from
linear; all steps run as one batched forward and backward. Both return `PatchingResult`s with method "gradient" or
"ig" whose `values` are base_metric + estimated effect, so they compare cell by cell with `activation_patching`.

    >>> from interplab.probes.lenses import attribution_patching
    >>> approx = attribution_patching(model, clean, corrupt, sites=["resid_pre", "attn_z"])
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from interplab.core.errors import ConfigError
from interplab.probes.lenses.common import (GradProbe, Interpolate, Metric, check_kinds, grid_layers,
                                            logit_diff_metric, make_pair, token_strings)
from interplab.probes.lenses.patching import DIRECTIONS, POSITION_MODES, PatchingResult, PatchingSweep, run_pair

METHODS = ("gradient", "ig")


@dataclass
class AttributionConfig:
    """An attribution-patching grid (same grid fields as `PatchingConfig`).

    method: "gradient" (one forward + backward at the base run) or "ig" (integrated gradients along the path from
        the base run's embeddings to the source run's, `ig_steps` midpoint-rule points, one batched pass).
    """

    sites: list[str] = field(default_factory=lambda: ["resid_pre"])
    layers: list[int] | None = None
    positions: str = "each"
    direction: str = "denoise"
    method: str = "gradient"
    ig_steps: int = 8

    def validate(self) -> "AttributionConfig":
        if isinstance(self.sites, str):
            self.sites = [self.sites]
        check_kinds(self.sites)
        if self.positions not in POSITION_MODES:
            raise ConfigError(f"positions must be one of {POSITION_MODES}, got {self.positions!r}")
        if self.direction not in DIRECTIONS:
            raise ConfigError(f"direction must be one of {DIRECTIONS}, got {self.direction!r}")
        if self.method not in METHODS:
            raise ConfigError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.ig_steps < 1:
            raise ConfigError(f"ig_steps must be >= 1, got {self.ig_steps}")
        return self


def attribution_grid(model, base_ids: list[int], base_acts: dict[str, torch.Tensor],
                     src_acts: dict[str, torch.Tensor], sites: Sequence[str], metric: Metric, *,
                     method: str = "gradient", ig_steps: int = 8, edits=None) -> dict[str, torch.Tensor]:
    """{site: (src - base) * grad} per element, summed over the feature axis: [p] per site ([p, H] for attn_z).

    base_acts / src_acts: {site: [1, p, ...]} activations of the two runs (the estimate is exact to first order in
    src - base). With method "ig" the gradient is averaged over the path resid_pre.0: base -> src."""
    n = 1 if method == "gradient" else ig_steps
    probes = {s: torch.zeros_like(base_acts[s], dtype=torch.float64 if model.dtype == torch.float64
                                  else torch.float32).requires_grad_(True) for s in sites}
    extra = []
    if method == "ig":
        alphas = (torch.arange(ig_steps, dtype=torch.float64) + 0.5) / ig_steps
        extra.append(Interpolate("resid_pre.0", src_acts["resid_pre.0"], alphas))
    extra += [GradProbe(s, d) for s, d in probes.items()]
    out = model.run([base_ids] * n, edits=list(edits or []) + extra, grad=True)
    m = metric(out.logits[:, -1]).sum() / n  # mean over the path points
    grads = torch.autograd.grad(m, list(probes.values()), allow_unused=True)
    res = {}
    for s, g in zip(probes, grads):
        g = torch.zeros_like(probes[s]) if g is None else g
        diff = (src_acts[s].to(g.dtype) - base_acts[s].to(g.dtype))
        res[s] = (diff * g).sum(-1)[0].detach().double().cpu()  # [p] or [p, H]
    return res


def attribution_patching(model, clean, corrupt, config: AttributionConfig | None = None, *, answer=None, wrong=None,
                         metric: Metric | None = None, edits=None, **overrides) -> PatchingSweep:
    """Attribution-patching estimates of every cell of the grid; same arguments as `activation_patching` plus
    `method` ("gradient" | "ig") and `ig_steps`. One forward + backward ("gradient") or one batched pass of
    ig_steps rows ("ig") covers every site, layer, position and head."""
    cfg = dataclasses.replace(config or AttributionConfig(), **overrides).validate()
    pair = make_pair(model, clean, corrupt, answer, wrong, edits)
    metric = metric or logit_diff_metric(pair.answer, pair.wrong)
    layers = grid_layers(model, cfg.layers)
    sites = [f"{k}.{layer}" for k in cfg.sites for layer in layers]
    capture = sorted(set(sites) | ({"resid_pre.0"} if cfg.method == "ig" else set()))
    c_cache, k_cache, m_clean, m_corrupt = run_pair(model, pair, capture, metric, edits)
    base_ids, base, src = ((pair.corrupt, k_cache, c_cache) if cfg.direction == "denoise"
                           else (pair.clean, c_cache, k_cache))
    est = attribution_grid(model, base_ids, {s: base[s] for s in capture}, {s: src[s] for s in capture}, sites,
                           metric, method=cfg.method, ig_steps=cfg.ig_steps, edits=edits)
    base_metric = m_corrupt if cfg.direction == "denoise" else m_clean
    results = {}
    for kind in cfg.sites:
        grid = torch.stack([est[f"{kind}.{layer}"] for layer in layers]).numpy()  # [L, p] or [L, p, H]
        if cfg.positions == "all":
            grid = grid.sum(1)  # first order: the effect of patching every position is the sum over positions
        results[kind] = PatchingResult(kind, base_metric + grid, np.array(layers), token_strings(model, base_ids),
                                       m_clean, m_corrupt, cfg.direction, cfg.method, model.n_kv_heads, model.name)
    return PatchingSweep(results, token_strings(model, pair.clean), token_strings(model, pair.corrupt),
                         token_strings(model, [pair.answer])[0],
                         "" if pair.wrong is None else token_strings(model, [pair.wrong])[0], None, model.name)


def compare_to_exact(approx: PatchingSweep, exact: PatchingSweep) -> "pd.DataFrame":  # noqa: F821
    """Per site kind: Spearman and Pearson correlation of estimated vs exact effects, and the max abs error."""
    import pandas as pd

    from interplab.probes.stats import pearson, spearman

    rows = []
    for kind, a in approx.results.items():
        e = exact.results[kind]
        x, y = a.effect.ravel(), e.effect.ravel()
        rows.append(dict(site=kind, method=a.method, n_cells=x.size, spearman=float(spearman(x, y)),
                         pearson=float(pearson(x, y)), max_abs_error=float(np.abs(x - y).max())))
    return pd.DataFrame(rows)
