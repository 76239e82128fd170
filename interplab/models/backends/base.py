from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from interplab.core.edit import Edit, StepContext
from interplab.core.sites import Site


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
        sites = set(self.capture) | set(self.edits)
        return sorted(sites, key=lambda s: s.order_key(n_layers))

    def stop_site(self, n_layers: int) -> Site | None:
        """The deepest site of interest when the rest of the forward is not needed."""
        if self.need_logits or self.use_cache:
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
    for edit in req.edits.get(site, ()):
        x = edit(site.name, x, req.ctx)
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
