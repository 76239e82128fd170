"""TransformerLens 3.9 TransformerBridge backend: canonical sites -> TL hook names."""
from __future__ import annotations

import torch

from interplab.models.backends.base import (ForwardRequest, ForwardResult, StopForward, apply_edits,
                                            hf_forward_kwargs, keep)
from interplab.core.sites import SITE_KINDS, Site

TL_HOOKS = {
    "resid_pre": "blocks.{L}.hook_in",
    "resid_post": "blocks.{L}.hook_out",
    "attn_z": "blocks.{L}.attn.hook_z",
    "attn_pattern": "blocks.{L}.attn.hook_pattern",
    "attn_out": "blocks.{L}.hook_attn_out",
    "mlp_out": "blocks.{L}.hook_mlp_out",
    "final_norm": "ln_final.hook_out",
    "logits": "unembed.hook_out",
}


def tl_hook_name(site: Site) -> str:
    return TL_HOOKS[site.kind].format(L=site.layer)


def _kv_cache_compat(module, args, kwargs):
    # TL 3.9's attention bridge reads `past_key_values`; transformers >= 5.x passes `cache`, so without this the
    # KV cache is never updated and cached generation silently attends to the new token only.
    if kwargs.get("past_key_values") is None and kwargs.get("cache") is not None:
        kwargs["past_key_values"] = kwargs["cache"]
    return args, kwargs


class BridgeBackend:
    name = "bridge"
    editable_kinds = frozenset(SITE_KINDS)

    def __init__(self, bridge):
        self.bridge = bridge
        self.hf_model = bridge.original_model
        self.n_layers = int(bridge.cfg.n_layers)
        for block in bridge.blocks:
            block.attn.register_forward_pre_hook(_kv_cache_compat, with_kwargs=True)

    def forward(self, req: ForwardRequest) -> ForwardResult:
        captures: dict[str, torch.Tensor] = {}
        capture = set(req.capture)
        # Stop once every site of interest has fired (TL fires hook_pattern before hook_z, so "deepest" is not
        # a single well-defined hook here).
        pending = set(req.sites_in_order(self.n_layers)) if req.stop_site(self.n_layers) is not None else None

        def make_hook(site: Site):
            def hook(x, hook):
                x = apply_edits(site, x, req)
                if site in capture:
                    captures[site.name] = keep(x, req)
                if pending is not None:
                    pending.discard(site)
                    if not pending:
                        raise StopForward
                return x
            return hook

        fwd_hooks = [(tl_hook_name(s), make_hook(s)) for s in req.sites_in_order(self.n_layers)]
        out = None
        with torch.set_grad_enabled(req.grad), self.bridge.hooks(fwd_hooks=fwd_hooks):
            try:
                out = self.hf_model(**hf_forward_kwargs(req))
            except StopForward:
                pass
        if out is None:
            return ForwardResult(None, captures, None)
        kv = getattr(out, "past_key_values", None) if req.use_cache else None
        return ForwardResult(out.logits if req.need_logits else None, captures, kv)
