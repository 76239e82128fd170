"""Activation patching sweeps over sites x layers x positions (x heads for attn_z).

Denoising ("clean -> corrupt", TransformerLens's `get_act_patch_*` convention): run the corrupted prompt and write in
the clean run's activation at one cell; the metric of the patched run says how much that cell restores the clean
behaviour. Noising is the reverse (run clean, write in corrupt activations). The grid is batched: one forward holds
`batch_size` patched copies of the prompt, each patching a different (layer, position, head) cell, so a whole
layer x position grid costs about (cells / batch_size) forwards instead of one forward per cell.

    >>> from interplab.probes.lenses import activation_patching
    >>> sweep = activation_patching(model, clean, corrupt, sites=["resid_pre", "attn_z"])
    >>> sweep["resid_pre"].values.shape      # [n_layers, n_pos]
    >>> sweep["attn_z"].values.shape         # [n_layers, n_pos, n_heads] (query heads; GQA groups in to_frame)
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from interplab.core import progress
from interplab.core.errors import ConfigError, ShapeError
from interplab.core.result import Result
from interplab.interventions import Patch
from interplab.probes.lenses.common import (CellPatch, Metric, PromptPair, check_kinds, grid_layers,
                                            logit_diff_metric, make_pair, token_strings)

DIRECTIONS = ("denoise", "noise")
POSITION_MODES = ("each", "all")


@dataclass
class PatchingConfig:
    """A patching grid.

    sites: site kinds to sweep (resid_pre, resid_post, attn_out, mlp_out, attn_z; attn_z is swept per query head).
    layers: layers to sweep (None = all).
    positions: "each" patches one position per cell ([L, P] grids); "all" patches every position at once ([L]).
    direction: "denoise" runs the corrupt prompt and writes in clean activations; "noise" the reverse.
    batch_size: patched copies of the prompt per forward.
    """

    sites: list[str] = field(default_factory=lambda: ["resid_pre"])
    layers: list[int] | None = None
    positions: str = "each"
    direction: str = "denoise"
    batch_size: int = 32

    def validate(self) -> "PatchingConfig":
        check_kinds(self.sites)
        if isinstance(self.sites, str):
            self.sites = [self.sites]
        if self.positions not in POSITION_MODES:
            raise ConfigError(f"positions must be one of {POSITION_MODES}, got {self.positions!r}")
        if self.direction not in DIRECTIONS:
            raise ConfigError(f"direction must be one of {DIRECTIONS}, got {self.direction!r}")
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {self.batch_size}")
        return self


@dataclass
class PatchingResult(Result):
    """One site kind's patching grid.

    values: metric of each patched run (attribution methods: its first-order estimate), shaped
        [n_layers, n_pos] (positions="each"), [n_layers, n_pos, n_heads] (attn_z), [n_layers] or [n_layers, n_heads]
        (positions="all").
    layers: the layers of the grid's first axis. tokens: the prompt's tokens (the run prompt's, by position).
    clean_metric / corrupt_metric: the metric of the unpatched clean and corrupt runs.
    direction: "denoise" (runs corrupt) or "noise" (runs clean). method: "exact", "gradient" or "ig".
    n_kv_heads: KV groups of the model (query head h reads KV group h // (n_heads / n_kv_heads)).
    """

    site: str
    values: np.ndarray
    layers: np.ndarray
    tokens: list[str]
    clean_metric: float
    corrupt_metric: float
    direction: str = "denoise"
    method: str = "exact"
    n_kv_heads: int = 0
    model: str = ""

    def __post_init__(self):
        self.values = np.asarray(self.values, dtype=np.float64)
        self.layers = np.asarray(self.layers, dtype=np.int64).reshape(-1)
        if self.values.shape[:1] != self.layers.shape:
            raise ShapeError(f"values {self.values.shape} must start with one row per layer ({self.layers.size})")
        if self.per_position and self.values.shape[1] != len(self.tokens):
            raise ShapeError(f"values {self.values.shape} must have one column per token ({len(self.tokens)})")

    @property
    def per_position(self) -> bool:
        return self.values.ndim == 3 or (self.values.ndim == 2 and self.site != "attn_z")

    @property
    def base_metric(self) -> float:
        """The metric of the run that is patched into (corrupt when denoising)."""
        return self.corrupt_metric if self.direction == "denoise" else self.clean_metric

    @property
    def target_metric(self) -> float:
        return self.clean_metric if self.direction == "denoise" else self.corrupt_metric

    @property
    def effect(self) -> np.ndarray:
        """values - the unpatched run's metric."""
        return self.values - self.base_metric

    @property
    def normalized(self) -> np.ndarray:
        """0 = no change, 1 = the patched run reaches the other run's metric."""
        span = self.target_metric - self.base_metric
        return self.effect / span if span != 0 else np.full_like(self.values, np.nan)

    def to_frame(self):
        """One row per cell: site, layer, position, token, head, kv_group, value, effect, normalized."""
        import pandas as pd

        idx = np.indices(self.values.shape).reshape(self.values.ndim, -1)
        data = {"site": self.site, "method": self.method, "layer": self.layers[idx[0]]}
        axis = 1
        if self.per_position:
            data["position"] = idx[axis]
            data["token"] = [self.tokens[i] for i in idx[axis]]
            axis += 1
        if self.site == "attn_z":
            data["head"] = idx[axis]
            h = self.values.shape[-1]
            data["kv_group"] = idx[axis] // max(1, h // max(1, self.n_kv_heads or h))
        data.update(value=self.values.ravel(), effect=self.effect.ravel(), normalized=self.normalized.ravel())
        return pd.DataFrame(data)


@dataclass
class PatchingSweep(Result):
    """Every site kind's grid for one prompt pair, with the pair and the config."""

    results: dict[str, PatchingResult]
    clean_tokens: list[str]
    corrupt_tokens: list[str]
    answer: str
    wrong: str
    config: PatchingConfig | None = None
    model: str = ""

    def __getitem__(self, site: str) -> PatchingResult:
        return self.results[site]

    def to_frame(self):
        import pandas as pd

        return pd.concat([r.to_frame() for r in self.results.values()], ignore_index=True)


def _cells(kind: str, layers: list[int], n_pos: int, n_heads: int, per_position: bool) -> list[tuple]:
    positions = range(n_pos) if per_position else [None]
    heads = range(n_heads) if kind == "attn_z" else [None]
    return [(layer, p, h) for layer in layers for p in positions for h in heads]


def _cell_masks(kind: str, chunk: list[tuple], n_pos: int, n_heads: int) -> dict[int, torch.Tensor]:
    """layer -> [B, p] (or [B, p, H]) mask of the cells that chunk row r patches at that layer."""
    shape = (len(chunk), n_pos, n_heads) if kind == "attn_z" else (len(chunk), n_pos)
    masks: dict[int, torch.Tensor] = {}
    for r, (layer, p, h) in enumerate(chunk):
        m = masks.setdefault(layer, torch.zeros(shape, dtype=torch.bool))
        cols = slice(None) if p is None else p
        if h is None:
            m[r, cols] = True
        else:
            m[r, cols, h] = True
    return masks


def patch_grid(model, base_ids: list[int], sources: dict[str, torch.Tensor], kind: str, layers: Sequence[int],
               metric: Metric, *, per_position: bool = True, edits=None, batch_size: int = 32) -> np.ndarray:
    """The metric of `base_ids` with each grid cell of `kind` patched from `sources` ({"kind.L": [1, p, ...]}).

    Returns [len(layers), p] / [len(layers), p, H] (attn_z) / [len(layers)] / [len(layers), H]. Rows of one
    forward may patch different layers: each row's patch only touches its own layer, so the rows are independent."""
    n_pos, H = len(base_ids), model.n_heads
    cells = _cells(kind, list(layers), n_pos, H, per_position)
    out = np.empty(len(cells))
    # the metric reads the last position only: unembed just that one (most of a small model's forward otherwise),
    # unless an edit underneath touches the logits site, which needs every position
    last = None if any(str(s).split(".")[0] == "logits" for e in edits or () for s in e.sites) else 1
    with progress.task(len(cells), "cells", phase=kind) as bar:
        for start in range(0, len(cells), batch_size):
            chunk = cells[start:start + batch_size]
            masks = _cell_masks(kind, chunk, n_pos, H)
            patches = [CellPatch(f"{kind}.{layer}", sources[f"{kind}.{layer}"], m) for layer, m in masks.items()]
            logits = model.run([base_ids] * len(chunk), edits=list(edits or []) + patches,
                               logits_last=last).logits[:, -1]
            out[start:start + len(chunk)] = metric(logits).detach().double().cpu().numpy()
            bar.advance(len(chunk))
    shape = [len(layers)] + ([n_pos] if per_position else []) + ([H] if kind == "attn_z" else [])
    return out.reshape(shape)


def run_pair(model, pair: PromptPair, capture: Sequence[str], metric: Metric, edits=None):
    """Both unpatched runs: (clean cache, corrupt cache, clean metric, corrupt metric) under `edits`."""
    outs = [model.run([ids], capture=list(capture), edits=list(edits or [])) for ids in (pair.clean, pair.corrupt)]
    m = [float(metric(o.logits[:, -1])[0]) for o in outs]
    return outs[0].cache, outs[1].cache, m[0], m[1]


def activation_patching(model, clean, corrupt, config: PatchingConfig | None = None, *, answer=None, wrong=None,
                        metric: Metric | None = None, edits=None, **overrides) -> PatchingSweep:
    """Exact activation patching of every cell of the grid (see `PatchingConfig`); keyword overrides set config
    fields, e.g. `activation_patching(m, clean, corrupt, sites=["attn_z"], positions="all")`.

    metric: logits_last [B, V] -> [B]; default the logit difference answer - wrong, where answer defaults to the
    clean run's top token and wrong to the corrupt run's."""
    cfg = dataclasses.replace(config or PatchingConfig(), **overrides).validate()
    pair = make_pair(model, clean, corrupt, answer, wrong, edits)
    metric = metric or logit_diff_metric(pair.answer, pair.wrong)
    layers = grid_layers(model, cfg.layers)
    capture = [f"{k}.{layer}" for k in cfg.sites for layer in layers]
    c_cache, k_cache, m_clean, m_corrupt = run_pair(model, pair, capture, metric, edits)
    base, src = (pair.corrupt, c_cache) if cfg.direction == "denoise" else (pair.clean, k_cache)
    with progress.task(grid_size(model, len(base), cfg), "cells"):  # one count over every site kind
        grids = _sweep(model, cfg, base, src, capture, layers, metric, edits)
    results = {kind: PatchingResult(kind, vals, np.array(layers), token_strings(model, base), m_clean, m_corrupt,
                                    cfg.direction, "exact", model.n_kv_heads, model.name)
               for kind, vals in grids.items()}
    return PatchingSweep(results, token_strings(model, pair.clean), token_strings(model, pair.corrupt),
                         token_strings(model, [pair.answer])[0],
                         "" if pair.wrong is None else token_strings(model, [pair.wrong])[0], cfg, model.name)


def grid_size(model, n_pos: int, config: PatchingConfig) -> int:
    """How many cells (patched forwards) the grid of `config` has for an `n_pos`-token prompt."""
    layers = grid_layers(model, config.layers)
    return sum(len(_cells(k, layers, n_pos, model.n_heads, config.positions == "each")) for k in config.sites)


def _sweep(model, cfg, base, src, capture, layers, metric, edits) -> dict:
    return {kind: patch_grid(model, base, {s: src[s] for s in capture}, kind, layers, metric,
                             per_position=cfg.positions == "each", edits=edits, batch_size=cfg.batch_size)
            for kind in cfg.sites}


def patched_generation(model, clean, corrupt, site: str, position: int | None = None, head: int | None = None, *,
                       direction: str = "denoise", max_new_tokens: int = 8, edits=None) -> str:
    """The greedy continuation of the run prompt with one cell patched from the other run (the page's "click a
    cell"): `site` is "kind.L", `position` None patches every prompt position, `head` selects one attn_z head."""
    pair = make_pair(model, clean, corrupt, answer=0, wrong=0)  # token ids only; no metric is needed here
    c, k = pair.clean, pair.corrupt
    base, other = (k, c) if direction == "denoise" else (c, k)
    src = model.run([other], capture=[site], edits=list(edits or []), logits=False).cache[site]
    patch = Patch(site, src, positions="prompt" if position is None else [int(position)], phases=("prefill",),
                  heads=head)
    return model.generate([base], max_new_tokens=max_new_tokens, edits=list(edits or []) + [patch]).text[0]
