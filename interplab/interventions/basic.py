"""The built-in edits: Steer (add a vector), Ablate (zero or mean-replace), Patch (write in another run's values)."""
from __future__ import annotations

from typing import Sequence

import torch

from interplab.core.errors import InputError, ShapeError
from interplab.core.edit import PHASES, Edit, ModelShape, PositionSpec, StepContext, check_trailing, site_trailing
from interplab.core.sites import KV_HEAD_KINDS, QUERY_HEAD_KINDS, has_key_axis, kind_of

HEAD_KINDS = QUERY_HEAD_KINDS + KV_HEAD_KINDS + ("attn_scores", "attn_pattern")


def n_heads_at(shape: ModelShape, site: str) -> int:
    """How many heads a per-head site has: KV heads for attn_k / attn_rot_k / attn_v (GQA), query heads otherwise."""
    return shape.n_kv_heads if kind_of(site) in KV_HEAD_KINDS else shape.n_heads


def _vec_repr(v: torch.Tensor) -> str:
    return f"tensor{tuple(v.shape)} (norm {float(v.float().norm()):.3g})"


def _steer_op(v: torch.Tensor, scale: float):
    """x -> x + scale * v, v [*trail] or one vector per batch row [b, *trail] (Steer's one definition)."""
    def steer(x):
        vv = v.to(device=x.device, dtype=x.dtype)
        if vv.ndim == x.ndim - 2:
            return x + scale * vv
        return x + scale * vv.reshape(vv.shape[0], 1, *vv.shape[1:])
    return steer


def _ablate_op(value, heads, site: str):
    """x -> zero or `value` (broadcast), on every head or the selected query heads (Ablate's one definition)."""
    heads = None if heads is None else list(heads)
    head_axis = 1 if has_key_axis(site) else 2

    def ablate(x):
        repl = torch.zeros_like(x) if value is None else torch.broadcast_to(
            value.to(device=x.device, dtype=x.dtype), x.shape)
        if heads is None:
            return repl
        sel = torch.zeros(x.shape[head_axis], dtype=torch.bool, device=x.device)
        sel[heads] = True
        shape = [1] * x.ndim
        shape[head_axis] = x.shape[head_axis]
        return torch.where(sel.reshape(shape), repl, x)
    return ablate


class Steer(Edit):
    """x <- x + scale * vector at `site`.

    `vector` is [d] (the site's trailing shape, e.g. [n_heads, d_head] for attn_z) or [b, ...] for one vector per
    batch row. scale 0 (or an all-zero vector) is skipped entirely, so it is bit-identical to no edit."""

    def __init__(self, site: str, vector, positions: PositionSpec = "all", scale: float = 1.0,
                 phases: Sequence[str] = PHASES):
        self.sites = (site,)
        self.vector = torch.as_tensor(vector)
        self.positions = positions
        self.scale = float(scale)
        self.phases = tuple(phases)
        self._validate_phases()

    def validate(self, shape: ModelShape) -> None:
        check_trailing(shape, "Steer", "vector", self.vector.shape, self.sites[0], ((), ("batch",)))

    def is_noop(self) -> bool:
        return self.scale == 0.0 or not bool(self.vector.any())

    def apply(self, site, x, ctx):
        v, trail = self.vector, tuple(x.shape[2:])
        if tuple(v.shape) != trail and not (v.ndim == len(trail) + 1 and v.shape[0] == x.shape[0]
                                            and tuple(v.shape[1:]) == trail):
            raise ShapeError(f"Steer at {site}: vector shape {tuple(v.shape)} fits neither the site's trailing shape "
                             f"{trail} nor [batch={x.shape[0]}, *{trail}]")
        return self.transform(site, ctx)(x)

    def transform(self, site, ctx):
        return _steer_op(self.vector, self.scale)   # not detached: optimised steering vectors need its gradient

    def remote_apply(self, site, ctx):
        return _steer_op(self.vector.detach().cpu(), self.scale)   # shipped by value: a CPU copy

    def __repr__(self):
        return (f"Steer(site={self.sites[0]!r}, vector={_vec_repr(self.vector)}, positions={self.positions!r}, "
                f"scale={self.scale}, phases={self.effective_phases})")


class Ablate(Edit):
    """Replace the activation by zero (default) or by `value` (e.g. a dataset mean), optionally only some heads.

    `heads` selects heads on a per-head site: query heads on attn_q / attn_rot_q / attn_z / attn_scores /
    attn_pattern, KV heads on attn_k / attn_rot_k / attn_v (GQA). On attn_scores a masked score stays masked.
    Heads of several layers in one edit: `Ablate.heads({(3, 1), (5, 0)})` (a `HeadAblation`)."""

    def __init__(self, site: str, heads: Sequence[int] | int | None = None, positions: PositionSpec = "all",
                 value=None, phases: Sequence[str] = PHASES):
        self.sites = (site,)
        self.heads = [heads] if isinstance(heads, int) else (list(heads) if heads is not None else None)
        self.positions = positions
        self.value = None if value is None else torch.as_tensor(value)
        self.phases = tuple(phases)
        self._validate_phases()
        if self.heads is not None and kind_of(site) not in HEAD_KINDS:
            raise InputError(f"Ablate(heads=...) needs a per-head site ({', '.join(HEAD_KINDS)}), got {site!r}")

    @classmethod
    def heads(cls, heads, site: str = "attn_z", value=None, positions: PositionSpec = "all",
              phases: Sequence[str] = PHASES):
        """One edit that ablates any set of (layer, head) at `site` (a kind: "attn_z" by default), e.g.
        `Ablate.heads({(3, 1), (5, 0)})`: zero, or `value` ({(layer, head): [d_head]} or [n_layers, n_heads,
        d_head], e.g. the heads' mean outputs). Returns a `HeadAblation`."""
        from interplab.interventions.heads import HeadAblation

        return HeadAblation(heads, site=site, value=value, positions=positions, phases=phases)

    def validate(self, shape: ModelShape) -> None:
        site = self.sites[0]
        n = n_heads_at(shape, site)
        if self.heads is not None and any(not -n <= h < n for h in self.heads):
            what = "KV" if kind_of(site) in KV_HEAD_KINDS else "query"
            raise ShapeError(f"Ablate at {site}: heads {self.heads} out of range for this model's {n} {what} heads "
                             f"(0..{n - 1})")
        trail = site_trailing(shape, site)
        if self.value is not None and trail is not None:
            v = tuple(self.value.shape)
            ok = len(v) <= len(trail) + 2 and all(a in (1, t) for a, t in zip(v[::-1], trail[::-1]))
            if not ok:
                raise ShapeError(f"Ablate at {site}: value has shape {list(self.value.shape)}, which does not "
                                 f"broadcast to this model's per-token shape {list(trail)}")

    def apply(self, site, x, ctx):
        head_axis = 1 if has_key_axis(site) else 2
        n = x.shape[head_axis]
        if self.heads is not None and any(not -n <= h < n for h in self.heads):
            raise InputError(f"Ablate at {site}: heads {self.heads} out of range for {n} heads")
        return self.transform(site, ctx)(x)

    def transform(self, site, ctx):
        return _ablate_op(self.value, self.heads, site)

    def remote_apply(self, site, ctx):
        return _ablate_op(None if self.value is None else self.value.detach().cpu(), self.heads, site)

    def __repr__(self):
        val = "zero" if self.value is None else _vec_repr(self.value)
        return (f"Ablate(site={self.sites[0]!r}, heads={self.heads}, positions={self.positions!r}, value={val}, "
                f"phases={self.effective_phases})")


class Patch(Edit):
    """Write another run's activations in, indexed by absolute position.

    `source` is [b, n_pos, ...] or [n_pos, ...] where index i holds the value for absolute position i (0 = first
    real token), so the same Patch works in a plain run, in prefill and in every KV-cached decode step. Use
    `Patch.from_cache(cache, site)` to build it from a captured (left-padded) run. Positions past n_pos are kept.
    `heads` (on a [b, p, heads, d_head] site: attn_q/k/v, attn_rot_q/k, attn_z) patches just those heads and keeps
    the others: a head-indexed patch."""

    def __init__(self, site: str, source, positions: PositionSpec = "all", phases: Sequence[str] = PHASES,
                 heads: Sequence[int] | int | None = None):
        self.sites = (site,)
        self.source = torch.as_tensor(source)
        self.positions = positions
        self.phases = tuple(phases)
        self.heads = [heads] if isinstance(heads, int) else (list(heads) if heads is not None else None)
        self._validate_phases()
        if has_key_axis(site):
            raise InputError(f"Patch does not support {kind_of(site)} (the key axis grows during decoding); patch "
                             "attn_z, or attn_q / attn_k")
        if self.heads is not None and kind_of(site) not in QUERY_HEAD_KINDS + KV_HEAD_KINDS:
            raise InputError(f"Patch(heads=...) needs a per-head site ({', '.join(QUERY_HEAD_KINDS + KV_HEAD_KINDS)})"
                             f", got {site!r}")

    def validate(self, shape: ModelShape) -> None:
        check_trailing(shape, "Patch", "source", self.source.shape, self.sites[0], (("n_pos",), ("batch", "n_pos")))

    @classmethod
    def from_cache(cls, cache, site: str, **kwargs) -> "Patch":
        return cls(site, cache.by_position(site), **kwargs)

    def apply(self, site, x, ctx: StepContext):
        src = self.source.to(device=x.device, dtype=x.dtype)
        if src.ndim == x.ndim - 1:
            src = src.unsqueeze(0).expand(x.shape[0], *src.shape)
        if src.ndim != x.ndim or src.shape[0] != x.shape[0] or tuple(src.shape[2:]) != tuple(x.shape[2:]):
            raise ShapeError(f"Patch at {site}: source {tuple(self.source.shape)} does not fit activations "
                             f"{tuple(x.shape)} (expected [b, n_pos, *{tuple(x.shape[2:])}] or [n_pos, ...])")
        n_pos = src.shape[1]
        pos = ctx.positions.clamp(min=0)
        inside = pos < n_pos
        idx = pos.clamp(max=n_pos - 1)
        gathered = torch.gather(src, 1, idx.reshape(*idx.shape, *([1] * (x.ndim - 2))).expand(*idx.shape, *x.shape[2:]))
        keep = inside.reshape(*inside.shape, *([1] * (x.ndim - 2)))
        if self.heads is not None:
            n = x.shape[2]
            if any(not -n <= h < n for h in self.heads):
                raise InputError(f"Patch at {site}: heads {self.heads} out of range for {n} heads")
            sel = torch.zeros(n, dtype=torch.bool, device=x.device)
            sel[self.heads] = True
            keep = keep & sel.reshape(1, 1, n, *([1] * (x.ndim - 3)))
        return torch.where(keep, gathered, x)

    def remote_apply(self, site, ctx):
        source, pos = self.source.detach().cpu(), ctx.positions.clamp(min=0).cpu()

        def patch(x):
            src = source.to(device=x.device, dtype=x.dtype)
            if src.ndim == x.ndim - 1:
                src = src.unsqueeze(0).expand(x.shape[0], *src.shape)
            p = pos.to(x.device)
            n_pos = src.shape[1]
            idx = p.clamp(max=n_pos - 1)
            idx = idx.reshape(*idx.shape, *([1] * (x.ndim - 2))).expand(*idx.shape, *x.shape[2:])
            keep = (p < n_pos).reshape(*p.shape, *([1] * (x.ndim - 2)))
            return torch.where(keep, torch.gather(src, 1, idx), x)
        return patch

    def __repr__(self):
        heads = "" if self.heads is None else f", heads={self.heads}"
        return (f"Patch(site={self.sites[0]!r}, source={tuple(self.source.shape)}, positions={self.positions!r}"
                f"{heads}, phases={self.effective_phases})")
