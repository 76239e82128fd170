"""SubspacePatchback: write a recorded decode state's component in span(basis) back in (DecodeShare patchback).

At `resid_post.{layer}`, on generated tokens whose decode step s lies in the window W:

    h <- h + Pi (h_donor[s] - h),        Pi = Q Q^T (Q = orthonormalised `basis`)

i.e. the component of h in span(Q) is replaced by the donor's and the orthogonal complement is kept. Placed after a
`SubspaceProjection` at the same site (edits at a site run in list order), h is the ablated state h_abl and this is
h_abl + Pi (h_donor[s] - h_abl), the spec's patchback.

The decode step of a position is `position - prompt_length` (0 = the state of the first generated token, the one fed
at KV-cached decode step 0): defined per position, like the hook layer's phases, so a KV-cached step and an uncached
recomputation patch the same tokens. Prompt tokens (prefill) are never touched.

Donor states are per row: `donor_states` [b, K, d] holds, for batch row i, the state to use at decode step s in
`donor_states[i, s]` (e.g. `GenerateOutput.decode_cache["resid_post.L"]` of a baseline run over the same prompts:
the same-example identity check; or another example's states: a transfer donor). `donor_valid` [b, K] marks the
steps a donor has (a donor that stopped earlier has none after its stop); steps outside it, and steps >= K, are
left as they are. A [K, d] donor is shared by every row.
"""
from __future__ import annotations

from typing import Sequence, Union

import numpy as np
import torch

from interplab.core.errors import InputError, ShapeError
from interplab.core.edit import StepContext
from interplab.interventions.projection import SubspaceEdit

__all__ = ["SubspacePatchback", "parse_window", "window_label", "WINDOWS"]

Window = Union[str, int, Sequence[int], None]
WINDOWS = ("0", "0,1", "all")  # the spec's W in {0}, {0,1}, all


def parse_window(window: Window) -> tuple[int, ...] | None:
    """A decode-step window as a sorted tuple of step indices, or None for every step.

    Accepts "all" / None, an int (that single step), a sequence of ints, or a string "0,1" / "{0,1}"."""
    if window is None:
        return None
    if isinstance(window, str):
        w = window.strip().strip("{}").strip()
        if w == "all":
            return None
        try:
            steps = [int(s) for s in w.replace(" ", "").split(",") if s != ""]
        except ValueError:
            raise InputError(f"window must be 'all' or decode steps like '0' or '0,1'; got {window!r}") from None
    elif isinstance(window, (int, np.integer)):
        steps = [int(window)]
    else:
        steps = [int(s) for s in window]
    if not steps or any(s < 0 for s in steps):
        raise InputError(f"window must name at least one decode step >= 0 (or be 'all'); got {window!r}")
    return tuple(sorted(set(steps)))


def window_label(window: Window) -> str:
    """'all' or a set label such as '{0,1}'."""
    w = parse_window(window)
    return "all" if w is None else "{" + ",".join(map(str, w)) + "}"


class SubspacePatchback(SubspaceEdit):
    """h <- h + Pi (h_donor[s] - h) at `resid_post.{layer}` on decode steps s in `window` (see module doc).

    layer: block whose output is patched. basis: [d, k], orthonormalised once (QR). donor_states: [b, K, d] (one
    donor trajectory per batch row) or [K, d] (shared); numpy or torch. donor_valid: [b, K] (or [K]) bool, default
    all True. window: "all", a step, a list of steps or "0,1". The arithmetic runs in float64 for float64
    activations and float32 otherwise, then casts back. Counters (until `reset_counters()`): `n_calls`,
    `n_edited` (patched positions), `energy_patched` (sum of ||Pi (h_donor - h)||^2 over patched positions)."""

    phases = ("decode",)

    def __init__(self, layer: int, basis, donor_states, donor_valid=None, window: Window = "all"):
        self._set_basis(layer, basis)
        donor = torch.as_tensor(np.asarray(donor_states) if not isinstance(donor_states, torch.Tensor)
                                else donor_states).detach()
        if donor.ndim == 2:
            donor = donor.unsqueeze(0)
        if donor.ndim != 3 or donor.shape[-1] != self.d:
            raise ShapeError(f"donor_states must be [b, K, d={self.d}] or [K, d={self.d}]; got "
                             f"{tuple(torch.as_tensor(donor_states).shape)}")
        self.donor = donor
        if donor_valid is None:
            valid = torch.ones(donor.shape[:2], dtype=torch.bool)
        else:
            valid = torch.as_tensor(np.asarray(donor_valid) if not isinstance(donor_valid, torch.Tensor)
                                    else donor_valid).bool()
            if valid.ndim == 1:
                valid = valid.unsqueeze(0)
            if tuple(valid.shape) != tuple(donor.shape[:2]):
                raise ShapeError(f"donor_valid must be [b, K] = {tuple(donor.shape[:2])}; got {tuple(valid.shape)}")
        self.valid = valid
        self.window = parse_window(window)
        self.positions = self._select
        self.reset_counters()

    @property
    def n_steps(self) -> int:
        return int(self.donor.shape[1])

    def is_noop(self) -> bool:
        return self.k == 0 or self.n_steps == 0 or not bool(self.valid.any())

    def reset_counters(self) -> None:
        # the one mutable part of the edit: observation counters, private and read through properties
        self._counts = {"n_calls": 0, "n_edited": 0, "energy_patched": 0.0}

    n_calls = property(lambda self: self._counts["n_calls"], doc="forwards in which some position was edited")
    n_edited = property(lambda self: self._counts["n_edited"], doc="positions edited")
    energy_patched = property(lambda self: self._counts["energy_patched"], doc="squared norm moved by the edit")

    # -- indexing --------------------------------------------------------------------------------------------
    def _rows(self, n: int, what: torch.Tensor) -> torch.Tensor:
        if what.shape[0] == n:
            return what
        if what.shape[0] == 1:
            return what.expand(n, *what.shape[1:])
        raise ShapeError(f"SubspacePatchback holds donor states for {what.shape[0]} rows but the batch has {n}; "
                         "build one patchback per batch (rows in the same order as the prompts)")

    def _steps(self, ctx: StepContext) -> torch.Tensor:
        return ctx.positions - ctx.prompt_lengths[:, None].to(ctx.positions.device)  # [b, p] decode step

    def _select(self, ctx: StepContext) -> torch.Tensor:
        s = self._steps(ctx)
        K = self.n_steps
        inside = (s >= 0) & (s < K)
        if self.window is not None:
            inside &= torch.isin(s, torch.as_tensor(self.window, device=s.device, dtype=s.dtype))
        valid = self._rows(s.shape[0], self.valid).to(s.device)
        has = torch.gather(valid, 1, s.clamp(0, K - 1))
        return inside & has

    def _donor_at(self, ctx: StepContext, dtype, device) -> torch.Tensor:
        s = self._steps(ctx).clamp(0, self.n_steps - 1).to(device)
        donor = self._rows(s.shape[0], self.donor).to(device=device, dtype=dtype)
        return torch.gather(donor, 1, s[..., None].expand(*s.shape, donor.shape[-1]))

    # -- edit ------------------------------------------------------------------------------------------------
    def __call__(self, site, x, ctx):
        if not self.is_noop():
            m = ctx.real & ctx.position_phase_mask(self.phases) & self._select(ctx)
            n = int(m.sum())
            if n:
                self._counts["n_calls"] += 1
                self._counts["n_edited"] += n
                h = x.detach().to(torch.float64)
                q = self.Q.to(h.device)
                delta = (self._donor_at(ctx, torch.float64, h.device) - h)[m]
                self._counts["energy_patched"] += float(((delta @ q) ** 2).sum())
        return super().__call__(site, x, ctx)

    def apply(self, site: str, x: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        if x.shape[-1] != self.d:
            raise ShapeError(f"SubspacePatchback basis has d = {self.d} but {site} has width {x.shape[-1]}")
        cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
        q = self.Q.to(device=x.device, dtype=cdt)
        h = x.to(cdt)
        donor = self._donor_at(ctx, cdt, x.device)
        return (h + ((donor - h) @ q) @ q.T).to(x.dtype)

    def remote_apply(self, site, ctx):
        # The donor rows for this forward's decode steps are picked here, on the client, from ctx; the counters
        # need the activation, which stays on the remote engine, so they are not updated there.
        Q = self.Q.detach().cpu()
        donor64 = self._donor_at(ctx.to("cpu"), torch.float64, torch.device("cpu"))

        def patch_back(x):
            cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
            q = Q.to(device=x.device, dtype=cdt)
            h = x.to(cdt)
            donor = donor64.to(device=x.device, dtype=cdt)
            return (h + ((donor - h) @ q) @ q.T).to(x.dtype)
        return patch_back

    def __repr__(self):
        return (f"SubspacePatchback(layer={self.layer}, basis=[{self.d}, {self.k}], donors=[{self.donor.shape[0]}, "
                f"{self.n_steps}, {self.d}], window={window_label(self.window)!r}, phases=('decode',))")
