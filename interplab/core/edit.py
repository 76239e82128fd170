"""Edits: explicit, printable intervention objects (penzai-style), never hidden global state.

An `Edit` names the sites it touches, the phases it acts in and the positions it edits, and is otherwise a pure
tensor function. The hook layer calls every edit with an explicit `StepContext`; nothing is inferred from a
tensor's sequence length."""
from __future__ import annotations

import functools

from types import MappingProxyType

from dataclasses import dataclass
from typing import Callable, Sequence, Union

import numpy as np
import torch

from interplab.core.errors import InputError, RemoteError, ShapeError
from interplab.core.sites import KV_HEAD_KINDS, QUERY_HEAD_KINDS, SCALE_KINDS, has_key_axis, kind_of

PHASES = ("prefill", "decode")
PositionSpec = Union[str, int, Sequence[int], Callable[["StepContext"], torch.Tensor]]


@dataclass
class StepContext:
    """Where a forward pass is in a run or a generation.

    phase: "prefill" (the prompt forward, or a plain `run`) or "decode" (one KV-cached generation step).
    step: decode step index (0 for the first decode forward), -1 in prefill.
    positions: [b, p] absolute position of each column (0 = a row's first real token).
    prompt_lengths: [b] real prompt length of each row. Positions >= the prompt length are generated tokens.
    real: [b, p] bool, True for real tokens of rows that are still generating (False for left padding and for
        rows that already emitted EOS).
    """

    phase: str
    step: int
    positions: torch.Tensor
    prompt_lengths: torch.Tensor
    real: torch.Tensor

    def to(self, device) -> "StepContext":
        """This context with its tensors on `device` (itself when they are there already): an edit inside a layer
        placed on another device by a `device_map` sees masks on its activation's device."""
        device = torch.device(device)
        if self.positions.device == device:
            return self
        return StepContext(self.phase, self.step, self.positions.to(device), self.prompt_lengths.to(device),
                           self.real.to(device))

    def position_phase_mask(self, phases: Sequence[str]) -> torch.Tensor:
        """[b, p] True where a column belongs to one of `phases`: prompt tokens are prefill, generated tokens decode.

        Defined per position so that a KV-cached decode step and an uncached recomputation of the same sequence
        select exactly the same tokens."""
        is_decode = self.positions >= self.prompt_lengths[:, None]
        mask = torch.zeros_like(is_decode)
        if "prefill" in phases:
            mask |= ~is_decode
        if "decode" in phases:
            mask |= is_decode
        return mask

    def mask(self, spec: PositionSpec) -> torch.Tensor:
        """Turn a position spec into a [b, p] bool mask (before `real` is applied)."""
        pos, plen = self.positions, self.prompt_lengths[:, None]
        if callable(spec):
            out = torch.as_tensor(spec(self), device=pos.device)
            if out.shape != pos.shape or out.dtype != torch.bool:
                raise InputError(f"a position callable must return a bool mask of shape {tuple(pos.shape)}, "
                                 f"got {out.dtype} {tuple(out.shape)}")
            return out
        if isinstance(spec, str):
            if spec == "all":
                return torch.ones_like(pos, dtype=torch.bool)
            if spec == "prompt":
                return pos < plen
            if spec == "last_prompt":
                return pos == plen - 1
            if spec == "decode":
                return pos >= plen
            raise InputError(f"unknown position spec {spec!r}; use 'all', 'prompt', 'last_prompt', 'decode', an int, "
                             "a list of ints (absolute positions) or a callable ctx -> [b, p] bool mask")
        if isinstance(spec, int):
            return pos == spec
        idx = torch.as_tensor(list(spec), device=pos.device, dtype=pos.dtype)
        return torch.isin(pos, idx)


@dataclass(frozen=True)
class ModelShape:
    """The model dimensions an edit's arrays must fit (`LabModel.shape`)."""

    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_model: int
    d_head: int
    d_vocab: int
    d_mlp: int | None = None   # the MLP's hidden width (mlp_hidden); None where unknown

    @classmethod
    def of(cls, model) -> "ModelShape":
        d_mlp = getattr(model, "d_mlp", None)
        return cls(*(int(getattr(model, f)) for f in ("n_layers", "n_heads", "n_kv_heads", "d_model", "d_head",
                                                       "d_vocab")), d_mlp=None if d_mlp is None else int(d_mlp))


def site_trailing(shape: ModelShape, site: str) -> tuple[int, ...] | None:
    """The per-token shape of `site`'s activation (after [b, p]); None where it is not fixed: attn_pattern and
    attn_scores (the key axis grows during decoding), module sites (whatever the module returns), mlp_hidden of a
    model whose MLP width is unknown."""
    kind = kind_of(site)
    if has_key_axis(kind) or kind == "module":
        return None
    if kind in QUERY_HEAD_KINDS:
        return (shape.n_heads, shape.d_head)
    if kind in KV_HEAD_KINDS:
        return (shape.n_kv_heads, shape.d_head)
    if kind in SCALE_KINDS:
        return (1,)
    if kind == "mlp_hidden":
        return None if shape.d_mlp is None else (shape.d_mlp,)
    if kind == "logits":
        return (shape.d_vocab,)
    return (shape.d_model,)


def check_trailing(shape: ModelShape, owner: str, what: str, actual, site: str,
                   leads: Sequence[Sequence[str]]) -> None:
    """ShapeError unless `actual` is `[*lead, *site_trailing(site)]` for one of the named leading axes in `leads`
    (e.g. `((), ("batch",))`: the site's per-token shape, optionally with a batch axis in front)."""
    trail = site_trailing(shape, site)
    if trail is None:
        return
    actual = tuple(actual)
    n = len(actual) - len(trail)
    if n >= 0 and actual[n:] == trail and any(len(lead) == n for lead in leads):
        return
    want = " or ".join("[" + ", ".join([*lead, *map(str, trail)]) + "]" for lead in leads)
    raise ShapeError(f"{owner} at {site}: {what} has shape {list(actual)}, but this model needs {want} "
                     f"({describe_shape(shape)})")


def describe_shape(shape: ModelShape) -> str:
    return ", ".join(f"{f}={getattr(shape, f)}" for f in ("n_layers", "n_heads", "n_kv_heads", "d_model", "d_head",
                                                          "d_vocab"))


def broadcast_mask(mask: torch.Tensor, x: torch.Tensor, site: str) -> torch.Tensor:
    """Broadcast a [b, p] position mask onto an activation tensor of the given site."""
    if has_key_axis(site):  # [b, h, q, k]: positions index the query axis
        return mask[:, None, :, None]
    return mask.reshape(*mask.shape, *([1] * (x.ndim - 2)))


class Edit:
    """Base class of all interventions.

    Subclasses set `sites` (canonical site names), optionally `phases` and `positions`, and implement either
    `transform(site, ctx) -> (x -> x')`, one definition that serves both the local hook (`apply`) and remote
    engines (`remote_apply`), or `apply(site, x, ctx) -> Tensor` (and `remote_apply` if it should run remotely).
    Either returns the edited activation for the whole tensor; the base class restricts the change to real tokens
    of the selected phases and positions, so padding and finished rows are never edited.

    Edits are immutable once built, so what `repr` shows is what runs: setting a public attribute afterwards
    raises AttributeError (build a new edit instead), and the constructor takes its own copy of every tensor
    (changing the caller's tensor later changes nothing; autograd still flows through the copy), stores lists as
    tuples and dicts as read-only mappings (interplab's built-in edits; a user subclass keeps what it sets).
    Attributes starting with "_" are the edit's private caches.
    """

    sites: tuple[str, ...] = ()
    phases: tuple[str, ...] = PHASES
    positions: PositionSpec = "all"

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        init = cls.__dict__.get("__init__")
        if init is None:
            return

        @functools.wraps(init)
        def __init__(self, *args, **kwargs):
            init(self, *args, **kwargs)
            # frozen once the most-derived constructor is done (a subclass's __init__ may still set attributes
            # after calling super().__init__)
            if next(k for k in type(self).__mro__ if "__init__" in k.__dict__) is cls:
                # interplab's own edits take their own copies; a user's subclass keeps what it set (it may
                # keep e.g. a list it appends to as a record of calls)
                if cls.__module__.startswith("interplab."):
                    for name, value in list(vars(self).items()):
                        if not name.startswith("_"):
                            object.__setattr__(self, name, _owned(value))
                object.__setattr__(self, "_frozen", True)

        cls.__init__ = __init__

    def __setattr__(self, name: str, value) -> None:
        if not name.startswith("_") and getattr(self, "_frozen", False):
            raise AttributeError(f"{type(self).__name__} is immutable: cannot set {name!r} after it is built; "
                                 "build a new edit with the value you want")
        object.__setattr__(self, name, value)

    def transform(self, site: str, ctx: StepContext):
        """A closure `x -> edited x` over the whole activation, from torch operations and tensors only (so a remote
        engine can run it too), or None when the edit defines `apply` itself."""
        return None

    def apply(self, site: str, x: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        op = self.transform(site, ctx)
        if op is None:  # pragma: no cover - abstract
            raise NotImplementedError(f"{type(self).__name__} must implement transform(site, ctx) or "
                                      "apply(site, x, ctx)")
        return op(x)

    def validate(self, shape: ModelShape) -> None:
        """Raise `ShapeError` naming the expected shape when this edit's arrays do not fit the model.

        `shape` is a `ModelShape` (anything with its attributes works, e.g. a LabModel). The hook layer calls it
        once per edit object and model, the first time the edit is applied; edits without arrays need not
        override it."""

    def is_noop(self) -> bool:
        """True when the edit provably changes nothing (e.g. zero strength); the hook layer then skips it."""
        return False

    def __call__(self, site: str, x: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        if self.is_noop():
            return x
        ctx = ctx.to(x.device)
        mask = ctx.real & ctx.position_phase_mask(self.phases) & ctx.mask(self.positions)
        if not bool(mask.any()):
            return x
        edited = self.apply(site, x, ctx)
        if bool(mask.all()):
            return edited
        return torch.where(broadcast_mask(mask, x, site), edited, x)

    @property
    def effective_phases(self) -> tuple[str, ...]:
        """The phases this edit actually touches: `phases` narrowed by what `positions` can select ("decode"
        positions exist only while decoding, "prompt" / "last_prompt" ones only in the prefill). Reprs print
        this, so `Steer(..., positions="decode")` says it runs while decoding only."""
        implied = {"decode": ("decode",), "prompt": ("prefill",), "last_prompt": ("prefill",)}
        only = implied.get(self.positions) if isinstance(self.positions, str) else None
        return tuple(p for p in self.phases if only is None or p in only)

    def _validate_phases(self) -> None:
        bad = [p for p in self.phases if p not in PHASES]
        if bad or not self.phases:
            raise InputError(f"{type(self).__name__}: phases must be a non-empty subset of {PHASES}, got {self.phases}")

    # ------------------------------------------------------------------ remote engines
    def remote_apply(self, site: str, ctx: StepContext):
        """A closure `x -> edited x` over the whole activation, built from torch operations and tensors only (no
        interplab names), or None when this edit cannot run on a remote engine.

        A remote engine (nnsight `remote=True` / `remote="local"`) runs the forward where interplab is not
        installed; nnsight's serializer ships closures by value together with the tensors they hold. Everything the
        edit needs from `ctx` must be read here (on the client) and captured in the closure. Built-in edits
        override this (or define `transform`, which serves both); a user subclass that does neither raises
        `RemoteError` when used remotely."""
        return self.transform(site, ctx)

    def remote_op(self, site: str, ctx: StepContext):
        """The remote form of `__call__` for one forward: None (nothing to do) or a self-contained closure
        `x -> x'` that applies `remote_apply` at the real tokens of the selected phases and positions only."""
        if self.is_noop():
            return None
        mask = ctx.real & ctx.position_phase_mask(self.phases) & ctx.mask(self.positions)
        if not bool(mask.any()):
            return None
        op = self.remote_apply(site, ctx)
        if op is None:
            raise RemoteError(f"{type(self).__name__} cannot run on a remote engine: it does not provide "
                              "remote_apply(site, ctx) (a closure of torch operations the remote server can run "
                              "without interplab). Run it locally (remote=False) or implement remote_apply.")
        if bool(mask.all()):
            return op
        kind = kind_of(site)
        m = mask[:, None, :, None] if has_key_axis(kind) else (
            mask[:, :, None, None] if kind in QUERY_HEAD_KINDS + KV_HEAD_KINDS else mask[:, :, None])
        return _masked(op, m.cpu())


def _owned(value):
    """The edit's own, unchangeable copy of a constructor value: tensors cloned (so the caller's later in-place
    changes do not reach a built edit), lists as tuples, dicts as read-only mappings, recursively."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, np.ndarray):
        own = value.copy()
        own.setflags(write=False)
        return own
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return tuple(_owned(v) for v in value)
    if isinstance(value, (dict, MappingProxyType)):
        return MappingProxyType({k: _owned(v) for k, v in value.items()})
    return value


def _masked(op, m: torch.Tensor):
    # A nested function is pickled by value (cloudpickle cannot import it by name), with its cells: op and m.
    def masked(x):
        return torch.where(m.to(x.device), op(x), x)
    return masked
