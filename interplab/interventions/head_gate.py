"""TruthProbe soft head gating (spec truth_scores.md §3-4): turn a Truth-Score map into per-head gates and apply
them at every position of the prefill and of every decode step.

Gate modes (s = raw accuracy map [L, H], s_l = layer l's row):
  normalize       g = 1 + alpha * (s - min s_l) / (max s_l - min s_l + 1e-6)       in [1, 1 + alpha)
  contrast        g = 1 + alpha * (s - mean s_l)                                   layer mean 1; can go negative
  legacy_amplify  g = 1 + alpha * s                                                (x <- x + x * alpha * s)
  raw             g = s                                                            (x <- x * s)
  inverse_baseline g = per-layer min-max of 1 / (s + 1e-6)                         (ignores alpha)
  random_baseline g = 1 + U(-1, 1), one draw per call (the repo resamples per forward; see RandomHeadGate)

Layer gain (rebase): every mode but contrast has a layer-mean gate above 1, so it also raises the total attention
output of every gated layer, and the model reads that gain as much as the reallocation between heads. A strength
tuned on a 4-layer organism then breaks a real model: on SmolLM2-135M-Instruct, normalize at alpha 1 on its first 4
layers alone changes the next token on 8 of 8 prompts (results/gate-depth, scripts/gate_depth.py). rebase="layer_mean"
divides each layer's row by its mean, so every layer keeps its total attention gain and the gates only move weight
between its heads (contrast already does); a strength then means about the same whether 4 or all 30 layers are
gated. "none" (default) is the paper's formula.

Gate sites:
  "z" (default, paper semantics): z'_{l,h} = g_{l,h} * z_{l,h} at attn_z.l, i.e. before W_O; equivalent to scaling
      head h's rows of W_O by g.
  "attn_out_chunks" (repo-faithful): the attention block output attn_out.l [b, p, d_model] (after W_O, bias
      included, before the residual add) viewed as [b, p, H, d_model / H]; chunk h is scaled by g_{l,h}. This
      scales contiguous residual-coordinate blocks, not heads; it coincides with "z" only when W_O is block-diagonal.
"""
from __future__ import annotations

import functools
import warnings
from typing import Sequence

import numpy as np
import torch

from interplab.core.errors import ConfigError, ShapeError
from interplab.core.edit import PHASES, Edit, ModelShape, StepContext
from interplab.core.record import Record
from interplab.core.shapes import check_score_shape

GATE_MODES = ("normalize", "contrast", "legacy_amplify", "raw", "inverse_baseline", "random_baseline")
GATE_SITES = ("z", "attn_out_chunks")
GATE_REBASES = ("none", "layer_mean")


def _map(scores) -> np.ndarray:
    try:
        s = np.asarray(getattr(scores, "scores", scores), dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ShapeError(f"scores must be a numeric [n_layers, n_heads] map (or TruthScores); {exc}") from None
    if s.ndim != 2:
        raise ShapeError(f"scores must be a [n_layers, n_heads] map (or TruthScores), got shape {s.shape}")
    if not np.isfinite(s).all():
        raise ShapeError("scores contain NaN/inf; gates need a finite score for every head")
    return s


def truth_gates(scores, mode: str = "normalize", alpha: float = 0.0, *, n_layers: int | None = None,
                n_heads: int | None = None, seed: int | None = None, rebase: str = "none") -> np.ndarray:
    """Per-head gates [n_layers, n_heads] (float64) from a raw-accuracy Truth-Score map; formulas in the module doc.

    n_layers/n_heads: assert the map's orientation against the target model (a transposed map raises ShapeError).
    seed: only for mode="random_baseline".
    rebase: "none" (the paper's gates) or "layer_mean" (each layer's row divided by its mean; see the module doc)."""
    return rebase_gates(_gates(scores, mode, alpha, n_layers=n_layers, n_heads=n_heads, seed=seed), rebase)


def rebase_gates(gates, rebase: str = "layer_mean") -> np.ndarray:
    """Gates with each layer's mean gain taken out (rebase="layer_mean") or unchanged ("none"). A layer whose mean
    gate is not positive cannot be rebased (its heads' signs would flip): ConfigError naming the layer."""
    g = np.asarray(gates, dtype=np.float64)
    if rebase not in GATE_REBASES:
        raise ConfigError(f"gate rebase must be one of {GATE_REBASES}, got {rebase!r}")
    if rebase == "none":
        return g
    m = g.mean(1, keepdims=True)
    bad = np.flatnonzero(m[:, 0] <= 0)
    if bad.size:
        raise ConfigError(f"rebase='layer_mean' needs a positive mean gate in every layer; layers {bad.tolist()} have "
                          f"mean {m[bad, 0].round(3).tolist()}. Use a smaller alpha or rebase='none'.")
    return g / m


def _gates(scores, mode, alpha, *, n_layers, n_heads, seed) -> np.ndarray:
    s = _map(scores)
    if n_layers is not None or n_heads is not None:
        check_score_shape(s, n_layers if n_layers is not None else s.shape[0],
                          n_heads if n_heads is not None else s.shape[1])
    alpha = float(alpha)
    if mode == "normalize":
        lo, hi = s.min(1, keepdims=True), s.max(1, keepdims=True)
        return 1.0 + alpha * (s - lo) / (hi - lo + 1e-6)
    if mode == "contrast":
        return 1.0 + alpha * (s - s.mean(1, keepdims=True))
    if mode == "legacy_amplify":
        return 1.0 + alpha * s
    if mode == "raw":
        return s.copy()
    if mode == "inverse_baseline":
        inv = 1.0 / (s + 1e-6)
        lo, hi = inv.min(1, keepdims=True), inv.max(1, keepdims=True)
        return (inv - lo) / np.where(hi - lo > 0, hi - lo, 1.0)
    if mode == "random_baseline":
        return 1.0 + np.random.default_rng(seed).uniform(-1.0, 1.0, size=s.shape)
    raise ConfigError(f"gate mode must be one of {GATE_MODES}, got {mode!r}")


class GateSummary(Record):
    """`gate_summary`: gate_min, gate_max, gate_mean, n_negative (gates below 0), n_gates."""

    KEYS = ("gate_min", "gate_max", "gate_mean", "n_negative", "n_gates")


def gate_summary(gates) -> GateSummary:
    """min/max/mean of the gates and how many are negative (every reported run records these). gate_mean is also
    the mean layer gain (1 for contrast and for rebase="layer_mean")."""
    g = np.asarray(gates, dtype=np.float64)
    return GateSummary(gate_min=float(g.min()), gate_max=float(g.max()), gate_mean=float(g.mean()),
                       n_negative=int((g < 0).sum()), n_gates=int(g.size))


class HeadGate(Edit):
    """Scale every head of every layer by a gate, at every real position of the prefill and each decode step.

    gates: [n_layers, n_heads] array (e.g. from `truth_gates`), or a TruthScores-like object with `.scores` when
        used as raw gates. Layers whose gates are all exactly 1 are skipped (bit-identical to no edit).
    site: "z" (per head, before W_O; default) or "attn_out_chunks" (the authors' code: chunks of the attention
        output after W_O).
    phases: where to gate (both by default, as the repo does).
    Gates are cast to the activation dtype at application time (the repo computes in float64, then casts).
    """

    def __init__(self, gates, site: str = "z", phases: Sequence[str] = PHASES, positions="all"):
        g = _map(gates).copy()
        g.setflags(write=False)  # the gates are the edit: read-only, so sites and repr never go stale
        if site not in GATE_SITES:
            raise ConfigError(f"HeadGate site must be one of {GATE_SITES}, got {site!r}")
        self.gates = g
        self.site = site
        self.phases = tuple(phases)
        self.positions = positions
        self._validate_phases()
        self._cache: dict = {}
        if (g < 0).any():
            warnings.warn(f"HeadGate: {(g < 0).sum()} negative gates (min {g.min():.3f}); they flip the sign of "
                          "those heads' outputs (faithful to the repo's contrast mode, not clipped)", stacklevel=2)

    @functools.cached_property
    def _layers(self) -> list[int]:
        """Layers with a gate other than 1 (the others are skipped: bit-identical to no edit)."""
        return [l for l in range(self.gates.shape[0]) if not np.all(self.gates[l] == 1.0)]

    @functools.cached_property
    def sites(self) -> tuple[str, ...]:
        # derived once from the read-only gates (the hook layer reads it on every forward)
        kind = "attn_z" if self.site == "z" else "attn_out"
        return tuple(f"{kind}.{l}" for l in self._layers)

    @property
    def n_layers(self) -> int:
        return self.gates.shape[0]

    @property
    def n_heads(self) -> int:
        return self.gates.shape[1]

    def validate(self, shape: ModelShape) -> None:
        """The gates must be [n_layers, n_heads] (query heads) of the model; the chunk site needs d_model to split
        into n_heads chunks (a warning when n_heads * d_head != d_model)."""
        try:
            check_score_shape(self.gates, shape.n_layers, shape.n_heads)
        except ShapeError as e:
            raise ShapeError(f"{type(self).__name__} gates: {e}") from None
        if self.site == "attn_out_chunks":
            if shape.d_model % shape.n_heads:
                raise ShapeError(f"attn_out_chunks needs d_model ({shape.d_model}) divisible by n_heads "
                                 f"({shape.n_heads})")
            if shape.n_heads * shape.d_head != shape.d_model:
                warnings.warn("attn_out_chunks: n_heads * d_head != d_model, so chunks do not even nominally "
                              "correspond to heads", stacklevel=2)

    def is_noop(self) -> bool:
        return not self._layers

    def _gate(self, layer: int, device, dtype) -> torch.Tensor:
        key = (layer, str(device), dtype)
        if key not in self._cache:
            self._cache[key] = torch.tensor(self.gates[layer], dtype=torch.float64).to(device=device, dtype=dtype)
        return self._cache[key]

    def apply(self, site: str, x: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        H = self.n_heads
        if self.site == "z" and (x.ndim != 4 or x.shape[2] != H):
            raise ShapeError(f"HeadGate at {site}: expected [b, p, n_heads={H}, d_head], got {tuple(x.shape)}; "
                             "are the gates [n_layers, n_heads] of this model?")
        if self.site != "z" and x.shape[-1] % H:
            raise ShapeError(f"HeadGate attn_out_chunks at {site}: d_model={x.shape[-1]} is not divisible by "
                             f"n_heads={H}")
        return self.transform(site, ctx)(x)

    def transform(self, site, ctx):
        """The gate of this site's layer as a closure (float64 gates cast to the activation's dtype, as the repo
        does); local runs and remote engines both use it."""
        g = self._gate(int(site.rsplit(".", 1)[1]), "cpu", torch.float64)
        chunks = self.site != "z"

        def gate(x):
            gg = g.to(device=x.device, dtype=x.dtype)
            if not chunks:
                return x * gg[:, None]
            H = gg.shape[0]
            return (x.reshape(*x.shape[:-1], H, x.shape[-1] // H) * gg[:, None]).reshape(x.shape)
        return gate

    def describe(self) -> dict:
        return {"gate_site": self.site, "phases": list(self.phases), **gate_summary(self.gates)}

    def __repr__(self):
        s = gate_summary(self.gates)
        return (f"HeadGate(gates[{self.n_layers}x{self.n_heads}] min={s['gate_min']:.3f} max={s['gate_max']:.3f}, "
                f"site={self.site!r}, phases={self.effective_phases})")


class RandomHeadGate(HeadGate):
    """The repo's `random_head_ablation` baseline: g = 1 + U(-1, 1), resampled on every forward call and layer
    (so cached and uncached generation differ by construction). Seeded for reproducibility."""

    def __init__(self, n_layers: int, n_heads: int, site: str = "z", seed: int = 0, phases: Sequence[str] = PHASES):
        super().__init__(np.zeros((n_layers, n_heads)), site=site, phases=phases)
        self.seed = seed
        self._gen = torch.Generator().manual_seed(seed)

    @functools.cached_property
    def _layers(self) -> list[int]:
        return list(range(self.gates.shape[0]))     # every layer: its gates are drawn on each forward

    def _gate(self, layer, device, dtype):
        g = 1.0 + (torch.rand(self.n_heads, generator=self._gen, dtype=torch.float64) * 2 - 1)
        return g.to(device=device, dtype=dtype)

    def __repr__(self):
        return f"RandomHeadGate({self.n_layers}x{self.n_heads}, site={self.site!r}, seed={self.seed})"
