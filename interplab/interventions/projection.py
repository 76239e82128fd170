"""SubspaceProjection: h <- h - alpha Q Q^T h at `resid_post.layer`, only in the listed phases (DecodeShare).

Phases come from the hook layer's explicit StepContext (a prompt token is "prefill", a generated token "decode"; the
hook layer defines this per position, so a KV-cached decode step and an uncached recomputation of the whole
sequence edit exactly the same tokens). `boundary=True` additionally edits the last prompt token (absolute position
T-1), which is what the reference code's "decode-aligned boundary" loop does when it prefills prompt[:-1] and then
runs the last prompt token as a decode step: the state at T-1 depends only on earlier positions, so editing it inside
the full prefill is the same computation.

`teacher_forced(edit, prompt_lengths)` turns any edit into its equivalent for a plain `LabModel.run` over
prompt + continuation sequences (every token of such a run is "prefill" to the hook layer), so forced-choice
scoring can run teacher-forced candidates in one batched forward and still edit exactly the positions a cached
decode loop would edit.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Sequence

import numpy as np
import torch

from interplab.core.errors import InputError, ShapeError
from interplab.core.edit import PHASES, Edit, ModelShape, PositionSpec, StepContext
from interplab.core.shapes import orthonormalize

__all__ = ["SubspaceProjection", "teacher_forced", "first_decode_steps"]


def _boundary_positions(ctx: StepContext) -> torch.Tensor:
    return ctx.positions >= (ctx.prompt_lengths[:, None] - 1)


class SubspaceEdit(Edit):
    """Base of the edits that act on span(basis) at `resid_post.{layer}`: one orthonormal basis Q (float64 [d, k],
    QR once, so any basis of the same subspace gives the same edit) and its sizes."""

    def _set_basis(self, layer: int, basis) -> None:
        self.layer = int(layer)
        self.sites = (f"resid_post.{self.layer}",)
        b = basis.detach().cpu().double().numpy() if isinstance(basis, torch.Tensor) else np.asarray(basis, float)
        if b.ndim != 2:
            raise ShapeError(f"{type(self).__name__} basis must be [d, k]; got shape {b.shape}")
        q = orthonormalize(b) if b.shape[1] else np.zeros((b.shape[0], 0))
        self.Q = torch.from_numpy(np.ascontiguousarray(q))

    def validate(self, shape: ModelShape) -> None:
        if self.d != shape.d_model:
            raise ShapeError(f"{type(self).__name__} at {self.sites[0]}: basis has shape [{self.d}, {self.k}], but "
                             f"this model needs [d_model={shape.d_model}, k]")

    @property
    def k(self) -> int:
        return int(self.Q.shape[1])

    @property
    def d(self) -> int:
        return int(self.Q.shape[0])


class SubspaceProjection(SubspaceEdit):
    """Remove (alpha = 1), shrink (0 < alpha < 1) or over-remove (alpha > 1) the component of the residual stream in
    span(basis) at `resid_post.{layer}`.

    layer: block whose output is edited. basis: [d, k] (numpy or torch); it is orthonormalised once (QR) so any
    basis of the same subspace gives the same edit. alpha: strength (0 is skipped entirely, bit-identical to no
    edit). phases: ("decode",) (default: generated tokens only), ("prefill",) or both. boundary: also edit the last
    prompt token (the reference code's boundary loop). positions: an extra position spec ANDed in (e.g.
    "last_prompt" with phases=("prefill",) is the H3 prefill-locus arm). stage: the staged variant, editing
    generated tokens only while fewer than `stage` tokens have been generated (positions < T + stage; prompt
    positions are unaffected). The arithmetic runs in float64 for
    float64 activations and in float32 otherwise, then casts back (as the reference hook does).
    Budget counters (accumulated over runs until `reset_counters()`): `n_calls` (forwards in which some position
    was edited), `n_edited` (edited positions) and `energy_removed` (sum over edited positions of
    ||h - h~||^2 = alpha^2 ||Q^T h||^2).
    """

    def __init__(self, layer: int, basis, alpha: float = 1.0, phases: Sequence[str] = ("decode",), *,
                 boundary: bool = False, positions: PositionSpec = "all", stage: int | None = None):
        self._set_basis(layer, basis)
        self.alpha = float(alpha)
        self.boundary = bool(boundary)
        self.user_phases = tuple(phases)
        self.phases = tuple(phases)
        self._validate_phases()
        self.user_positions = positions
        self.stage = None if stage is None else int(stage)
        if self.stage is not None:
            if self.stage < 1:
                raise InputError(f"stage must be >= 1 (edit the first `stage` generated tokens); got {stage}")
            positions = _compose(first_decode_steps(self.stage), positions)
        if self.boundary:
            if "decode" not in self.phases:
                raise InputError("boundary=True edits the last prompt token as the first decode step; "
                                 "phases must include 'decode'")
            # Every generated token, plus the last prompt token inside the prefill.
            self.phases = PHASES
            self.positions = _compose(_boundary_positions, positions)
        else:
            self.positions = positions
        self.reset_counters()

    def is_noop(self) -> bool:
        return self.alpha == 0.0 or self.k == 0

    def reset_counters(self) -> None:
        # the one mutable part of the edit: observation counters, private and read through properties
        self._counts = {"n_calls": 0, "n_edited": 0, "energy_removed": 0.0}

    n_calls = property(lambda self: self._counts["n_calls"], doc="forwards in which some position was edited")
    n_edited = property(lambda self: self._counts["n_edited"], doc="positions edited")
    energy_removed = property(lambda self: self._counts["energy_removed"], doc="squared norm moved by the edit")

    def _count(self, x: torch.Tensor, m: torch.Tensor) -> None:
        n = int(m.sum())
        if n:
            self._counts["n_calls"] += 1
            self._counts["n_edited"] += n
            h = x[m].detach().to(torch.float64)
            q = self.Q.to(h.device)
            self._counts["energy_removed"] += float(self.alpha ** 2 * ((h @ q) ** 2).sum())

    def __call__(self, site, x, ctx):
        if not self.is_noop():
            self._count(x, ctx.real & ctx.position_phase_mask(self.phases) & ctx.mask(self.positions))
        return super().__call__(site, x, ctx)

    def apply(self, site: str, x: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        if x.shape[-1] != self.d:
            raise ShapeError(f"SubspaceProjection basis has d = {self.d} but {site} has width {x.shape[-1]}")
        cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
        q = self.Q.to(device=x.device, dtype=cdt)
        h = x.to(cdt)
        return (h - self.alpha * (h @ q) @ q.T).to(x.dtype)

    def remote_apply(self, site, ctx):
        # The budget counters need the activation, which stays on the remote engine: they are not updated there.
        Q, alpha = self.Q.detach().cpu(), self.alpha

        def project(x):
            cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
            q = Q.to(device=x.device, dtype=cdt)
            h = x.to(cdt)
            return (h - alpha * (h @ q) @ q.T).to(x.dtype)
        return project

    def removed_energy(self, h) -> torch.Tensor:
        """||h - h~||^2 = alpha^2 ||Q^T h||^2 per row of h [..., d] (the energy this edit removes)."""
        h = torch.as_tensor(h).to(torch.float64)
        return self.alpha ** 2 * ((h @ self.Q) ** 2).sum(-1)

    def with_alpha(self, alpha: float) -> "SubspaceProjection":
        e = copy.copy(self)
        e.alpha = float(alpha)
        e.reset_counters()
        return e

    def __repr__(self):
        extra = (", boundary=True" if self.boundary else "") + (f", stage={self.stage}" if self.stage else "")
        pos = "" if self.user_positions == "all" else f", positions={self.user_positions!r}"
        return (f"SubspaceProjection(layer={self.layer}, basis=[{self.d}, {self.k}], alpha={self.alpha}, "
                f"phases={self.user_phases}{extra}{pos})")


def first_decode_steps(stage: int):
    """A position spec selecting the first `stage` generated tokens (positions < prompt length + stage) and every
    prompt token; AND it with phases=("decode",) to edit only those generated tokens (the staged variant)."""
    def spec(ctx: StepContext) -> torch.Tensor:
        return ctx.positions < (ctx.prompt_lengths[:, None] + stage)
    return spec


def _compose(a, b: PositionSpec):
    if isinstance(b, str) and b == "all":
        return a

    def spec(ctx):
        return a(ctx) & ctx.mask(b)
    return spec


class _TeacherForced(Edit):
    """An edit re-targeted from a generation loop to a plain run over prompt + continuation (see module doc)."""

    def __init__(self, inner: Edit, prompt_lengths):
        self.inner = inner
        self.sites = tuple(inner.sites)
        self.phases = PHASES
        self.core = torch.as_tensor(prompt_lengths, dtype=torch.long).reshape(-1)

        def spec(ctx: StepContext) -> torch.Tensor:
            core = self.core.to(ctx.positions.device)
            if core.shape[0] != ctx.positions.shape[0]:
                raise ShapeError(f"teacher_forced edit was built for {core.shape[0]} rows but the batch has "
                                 f"{ctx.positions.shape[0]}")
            c = dataclasses.replace(ctx, prompt_lengths=core)
            return c.position_phase_mask(inner.phases) & c.mask(inner.positions)
        self.positions = spec

    def validate(self, shape: ModelShape) -> None:
        self.inner.validate(shape)

    def is_noop(self) -> bool:
        return self.inner.is_noop()

    def apply(self, site, x, ctx):
        return self.inner.apply(site, x, ctx)

    def __call__(self, site, x, ctx):
        if isinstance(self.inner, SubspaceProjection) and not self.is_noop():
            self.inner._count(x, ctx.real & self.positions(ctx))
        return super().__call__(site, x, ctx)

    def remote_apply(self, site, ctx):
        return self.inner.remote_apply(site, ctx)

    def __repr__(self):
        return f"teacher_forced({self.inner!r})"


def teacher_forced(edit: Edit, prompt_lengths) -> Edit:
    """Re-target `edit` for `LabModel.run` over rows that are prompt + continuation, where row i's first
    `prompt_lengths[i]` real tokens are the prompt: positions >= prompt length count as decode, the rest as prefill,
    exactly as in a generation loop over that prompt."""
    if not isinstance(edit, Edit):
        raise InputError(f"teacher_forced needs an interplab Edit, got {type(edit).__name__}")
    return _TeacherForced(edit, prompt_lengths)
