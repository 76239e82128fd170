from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from interplab.core.edit import Edit, StepContext
from interplab.core.sites import ModuleSite, Site


class StopForward(Exception):
    """Raised inside a hook to end a forward pass once the deepest requested site has fired."""


@dataclass
class ForwardRequest:
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    ctx: StepContext
    capture: list[Site]
    edits: dict[Site, list[Edit]] = field(default_factory=dict)
    kv: Any = None  # a transformers Cache from the previous step, or None
    use_cache: bool = False
    need_logits: bool = True
    grad: bool = False  # keep the autograd graph (gradients w.r.t. edit parameters or captures)
    logits_to_keep: int = 0  # unembed only the last k positions ([b, k, vocab]; 0: every position)

    def sites_in_order(self, n_layers: int) -> list[Site]:
        """The canonical sites to hook, in execution order. A module site (hooked on its module, see
        `module_hooks`) adds its block's resid_post as a silent marker, so a forward stopped early still runs the
        block that holds it."""
        sites = {s for s in (*self.capture, *self.edits) if not isinstance(s, ModuleSite)}
        sites |= {Site("resid_post", s.layer) for s in self.module_sites() if s.layer is not None}
        return sorted(sites, key=lambda s: s.order_key(n_layers))

    def module_sites(self) -> list[ModuleSite]:
        return list(dict.fromkeys(s for s in (*self.capture, *self.edits) if isinstance(s, ModuleSite)))

    def stop_site(self, n_layers: int) -> Site | None:
        """The deepest site of interest when the rest of the forward is not needed (None: run to the end, also
        when a module site lies outside the blocks)."""
        if self.need_logits or self.use_cache:
            return None
        if any(s.layer is None for s in self.module_sites()):
            return None
        ordered = self.sites_in_order(n_layers)
        return ordered[-1] if ordered else None


@dataclass
class ForwardResult:
    logits: torch.Tensor | None
    captures: dict[str, torch.Tensor]
    kv: Any


class Backend(Protocol):
    name: str
    hf_model: torch.nn.Module
    n_layers: int
    editable_kinds: frozenset[str]

    def forward(self, req: ForwardRequest) -> ForwardResult: ...


def keep(x: torch.Tensor, req: ForwardRequest) -> torch.Tensor:
    """A capture that later in-place edits cannot change; attached to the graph when gradients are on."""
    return x.clone() if req.grad else x.detach().clone()


def apply_edits(site: Site, x: torch.Tensor, req: ForwardRequest) -> torch.Tensor:
    edits = req.edits.get(site, ())
    if not edits:
        return x
    if site.kind == "resid_mid":
        return _edit_in_place(site, x, req)
    out = x
    for edit in edits:
        out = edit(site.name, out, req.ctx)
    if site.kind == "attn_scores" and out is not x:
        # A masked score (future key, padding) stays masked whatever the edit does (e.g. Ablate's zeros would
        # otherwise let a query attend to every later token): the additive mask is finfo.min (or -inf).
        out = torch.where(x <= torch.finfo(x.dtype).min / 2, x, out)
    return out


def _edit_in_place(site: Site, x: torch.Tensor, req: ForwardRequest) -> torch.Tensor:
    """resid_mid is read where the MLP's norm reads it, but the block also keeps that same tensor for its
    residual add (`residual = hidden_states` in every supported family). An edit must change both, as
    TransformerLens's hook_resid_mid does in HookedTransformer, so it is written into the tensor itself. (The bridge's
    own hook_resid_mid returns a new tensor that reaches only the MLP.) The edits read a copy under autograd, where
    an edit that saved its input for the backward pass would otherwise see it overwritten."""
    out = x.clone() if req.grad else x
    src = out
    for edit in req.edits[site]:
        out = edit(site.name, out, req.ctx)
    if out is not src:
        x.copy_(out)
    return x


def hf_forward_kwargs(req: ForwardRequest) -> dict:
    # transformers 5 renamed past_key_values -> cache in model forwards
    kw = dict(input_ids=req.input_ids, attention_mask=req.attention_mask, position_ids=req.position_ids,
              use_cache=req.use_cache)
    if req.kv is not None:
        kw["cache"] = req.kv
    if req.logits_to_keep:
        kw["logits_to_keep"] = req.logits_to_keep
    return kw
