"""Head edits over any set of (layer, head), in one edit: HeadScale (multiply) and HeadAblation (zero or replace).

Both act on one per-head site kind, attn_z by default (per query head, before W_O: scaling head h there scales its
contribution to the residual stream), and touch only the layers they name. `Ablate.heads({(3, 1), (5, 0)})` builds
a HeadAblation. (`HeadGate`, TruthProbe's gate, is the same multiplication driven by a full [n_layers, n_heads]
map.)"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np
import torch

from interplab.core.edit import PHASES, Edit, ModelShape, PositionSpec
from interplab.core.errors import InputError, ShapeError
from interplab.core.sites import KV_HEAD_KINDS, LAYER_KINDS, has_key_axis, kind_of
from interplab.interventions.basic import HEAD_KINDS, n_heads_at


def _kind(site: str) -> str:
    kind = kind_of(site)
    if kind not in HEAD_KINDS or kind not in LAYER_KINDS:
        raise InputError(f"head edits need a per-head site kind ({', '.join(HEAD_KINDS)}), got {site!r} (give the "
                         "kind alone, e.g. 'attn_z': the layers come from the (layer, head) pairs)")
    return kind


def _pairs(heads) -> list[tuple[int, int]]:
    try:
        pairs = sorted({(int(layer), int(head)) for layer, head in heads})
    except (TypeError, ValueError):
        raise InputError(f"heads must be (layer, head) pairs, e.g. {{(3, 1), (5, 0)}}; got {heads!r}") from None
    if not pairs:
        raise InputError("heads is empty: name at least one (layer, head)")
    return pairs


def _check_pairs(owner: str, pairs, kind: str, shape: ModelShape) -> None:
    n = n_heads_at(shape, kind)
    bad = [(layer, h) for layer, h in pairs if not (0 <= layer < shape.n_layers and 0 <= h < n)]
    if bad:
        what = "KV heads" if kind in KV_HEAD_KINDS else "query heads"
        raise ShapeError(f"{owner}: (layer, head) pairs {bad} are out of range for this model ({shape.n_layers} "
                         f"layers, {n} {what} at {kind})")


def _pair_text(pairs, fmt) -> str:
    shown = ", ".join(fmt(p) for p in pairs[:8])
    return shown + (f", ... ({len(pairs)} heads)" if len(pairs) > 8 else "")


class HeadScale(Edit):
    """x[..., head, :] <- factor * x[..., head, :] for every (layer, head) named, in one edit.

    scales: {(layer, head): factor} or a [n_layers, n_heads] array (entries equal to 1 are left out). factor 0
        silences a head; all factors 1 is bit-identical to no edit.
    site: the per-head site kind, "attn_z" (default). On attn_scores (pre-softmax) a factor is an inverse
        temperature of that head; masked scores stay masked."""

    def __init__(self, scales, site: str = "attn_z", positions: PositionSpec = "all",
                 phases: Sequence[str] = PHASES):
        self.kind = _kind(site)
        if isinstance(scales, Mapping):
            items = {(int(k[0]), int(k[1])): float(v) for k, v in scales.items()}
        else:
            arr = np.asarray(scales, dtype=np.float64)
            if arr.ndim != 2:
                raise ShapeError(f"HeadScale scales must be {{(layer, head): factor}} or a [n_layers, n_heads] "
                                 f"array, got shape {arr.shape}")
            items = {(int(i), int(j)): float(arr[i, j]) for i, j in zip(*np.nonzero(arr != 1.0))}
        if not all(np.isfinite(v) for v in items.values()):
            raise InputError("HeadScale factors must be finite")
        self.scales = dict(sorted((k, v) for k, v in items.items() if v != 1.0))
        self.positions = positions
        self.phases = tuple(phases)
        self._validate_phases()
        self.sites = tuple(f"{self.kind}.{layer}" for layer in sorted({k[0] for k in self.scales}))

    def validate(self, shape: ModelShape) -> None:
        _check_pairs("HeadScale", list(self.scales), self.kind, shape)

    def is_noop(self) -> bool:
        return not self.scales

    def transform(self, site, ctx):
        layer = int(site.rsplit(".", 1)[1])
        mine = {h: s for (lay, h), s in self.scales.items() if lay == layer}
        key_axis = has_key_axis(self.kind)

        def scale(x):   # torch and builtins only: a remote engine runs it without interplab
            n = x.shape[1] if key_axis else x.shape[2]
            g = torch.ones(n, dtype=x.dtype, device=x.device)
            for h, s in mine.items():
                g[h] = s
            return x * g.reshape([n, 1, 1] if key_axis else [n, 1])
        return scale

    def __repr__(self):
        body = _pair_text(list(self.scales.items()), lambda kv: f"L{kv[0][0]}h{kv[0][1]} x{kv[1]:g}")
        return f"HeadScale({self.kind}: {body or 'nothing'}; positions={self.positions!r}, phases={self.phases})"


class HeadAblation(Edit):
    """Every (layer, head) named is replaced by zero, or by `value`, in one edit (`Ablate.heads(...)`).

    value: None (zero), {(layer, head): [d_head]} or an array [n_layers, n_heads, d_head] (n_kv_heads at attn_k /
        attn_v / attn_rot_k), e.g. each head's mean output over a dataset (mean ablation); only on
        [b, p, heads, d_head] sites."""

    def __init__(self, heads: Iterable, site: str = "attn_z", value=None, positions: PositionSpec = "all",
                 phases: Sequence[str] = PHASES):
        self.kind = _kind(site)
        self.heads = _pairs(heads)
        if value is not None and has_key_axis(self.kind):
            raise InputError(f"HeadAblation value= needs a [b, p, heads, d_head] site, not {self.kind}")
        if isinstance(value, Mapping):
            value = {(int(k[0]), int(k[1])): torch.as_tensor(v) for k, v in value.items()}
            missing = [p for p in self.heads if p not in value]
            if missing:
                raise InputError(f"HeadAblation value has no entry for {missing}")
        elif value is not None:
            value = torch.as_tensor(value)
        self.value = value
        self.positions = positions
        self.phases = tuple(phases)
        self._validate_phases()
        self.sites = tuple(f"{self.kind}.{layer}" for layer in sorted({p[0] for p in self.heads}))

    def validate(self, shape: ModelShape) -> None:
        _check_pairs("HeadAblation", self.heads, self.kind, shape)
        v = self.value
        if isinstance(v, torch.Tensor) and tuple(v.shape) != (shape.n_layers, n_heads_at(shape, self.kind),
                                                             shape.d_head):
            raise ShapeError(f"HeadAblation value has shape {list(v.shape)}, but this model needs [n_layers="
                             f"{shape.n_layers}, n_heads={n_heads_at(shape, self.kind)}, d_head={shape.d_head}]")
        if isinstance(v, Mapping) and any(tuple(t.shape) != (shape.d_head,) for t in v.values()):
            raise ShapeError(f"HeadAblation value entries must be [d_head={shape.d_head}] vectors")

    def transform(self, site, ctx):
        layer = int(site.rsplit(".", 1)[1])
        mine = [h for lay, h in self.heads if lay == layer]
        key_axis, v = has_key_axis(self.kind), self.value
        rows = None
        if isinstance(v, Mapping):
            rows = torch.stack([v[(layer, h)].detach().cpu() for h in mine])
        elif v is not None:
            rows = v[layer, mine].detach().cpu()

        def ablate(x):   # torch and builtins only: a remote engine runs it without interplab
            n = x.shape[1] if key_axis else x.shape[2]
            sel = torch.zeros(n, dtype=torch.bool, device=x.device)
            sel[mine] = True
            if rows is None:
                repl = torch.zeros((), dtype=x.dtype, device=x.device)
            else:
                repl = torch.zeros(n, x.shape[-1], dtype=x.dtype, device=x.device)
                repl[mine] = rows.to(device=x.device, dtype=x.dtype)
            return torch.where(sel.reshape([n, 1, 1] if key_axis else [n, 1]), repl, x)
        return ablate

    def __repr__(self):
        val = "zero" if self.value is None else "given values"
        body = _pair_text(self.heads, lambda p: f"L{p[0]}h{p[1]}")
        return (f"HeadAblation({self.kind}: {body} -> {val}; positions={self.positions!r}, "
                f"phases={self.phases})")
