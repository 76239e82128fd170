"""nnsight 0.8 backend: canonical sites -> module paths of the Hugging Face model, read/written inside a trace."""
from __future__ import annotations

import torch

from interplab.core.errors import InterplabError, SiteError
from interplab.models.layout import get_module as _get, paths_for
from interplab.models.backends.base import ForwardRequest, ForwardResult, apply_edits, hf_forward_kwargs, keep
from interplab.core.sites import Site


class NNsightBackend:
    name = "nnsight"
    editable_kinds = frozenset({"resid_pre", "resid_post", "attn_z", "attn_out", "mlp_out", "final_norm", "logits"})

    def __init__(self, hf_model, n_heads: int, d_head: int):
        from nnsight import NNsight

        self.paths = paths_for(hf_model)
        self.hf_model = hf_model
        self.nn = NNsight(hf_model)
        self.n_layers = len(_get(hf_model, self.paths.layers))
        self.n_heads, self.d_head = n_heads, d_head

    def _block(self, layer: int):
        return _get(self.nn, self.paths.layers)[layer]

    def _visit(self, site: Site, req: ForwardRequest, captures: dict) -> None:
        """Read the site's activation inside the trace, apply edits, write it back, and capture it."""
        kind, p = site.kind, self.paths
        edits = req.edits.get(site)
        if kind == "attn_pattern" and edits:
            raise SiteError("editing attn_pattern needs the bridge backend (HF attention returns the pattern but "
                            "does not read it back); use backend='bridge' or edit attn_z")
        if kind in ("resid_pre",):
            mod = self._block(site.layer)
            x = mod.input
            new = apply_edits(site, x, req)
            if edits:
                mod.input = new
        elif kind == "resid_post":
            mod = self._block(site.layer)
            x = mod.output
            if isinstance(x, tuple):  # transformers 4-style block outputs
                new = apply_edits(site, x[0], req)
                if edits:
                    mod.output = (new, *x[1:])
            else:
                new = apply_edits(site, x, req)
                if edits:
                    mod.output = new
        elif kind == "attn_z":
            mod = _get(self._block(site.layer), p.o_proj)
            flat = mod.input
            x = flat.reshape(*flat.shape[:-1], self.n_heads, self.d_head)
            new = apply_edits(site, x, req)
            if edits:
                mod.input = new.reshape(flat.shape)
        elif kind in ("attn_out", "attn_pattern"):
            mod = _get(self._block(site.layer), p.attn)
            out = mod.output
            x = out[0] if kind == "attn_out" else out[1]
            if kind == "attn_pattern" and x is None:
                raise InterplabError("the attention module returned no pattern; load the model with "
                                     "attn_implementation='eager' (load_model does this)")
            new = apply_edits(site, x, req)
            if edits:
                mod.output = (new, *out[1:])
        elif kind in ("mlp_out", "final_norm", "logits"):
            path = {"mlp_out": None, "final_norm": p.final_norm, "logits": p.lm_head}[kind]
            mod = _get(self._block(site.layer), p.mlp) if kind == "mlp_out" else _get(self.nn, path)
            x = mod.output
            new = apply_edits(site, x, req)
            if edits:
                mod.output = new
        else:  # pragma: no cover - parse_site guarantees the kind
            raise SiteError(f"unsupported site {site}")
        if site in req.capture:
            captures[site.name] = keep(new, req).save()

    def forward(self, req: ForwardRequest) -> ForwardResult:
        captures: dict[str, torch.Tensor] = {}
        stop = req.stop_site(self.n_layers)
        out = None
        with torch.set_grad_enabled(req.grad):
            with self.nn.trace(**hf_forward_kwargs(req)) as tracer:
                for site in req.sites_in_order(self.n_layers):
                    self._visit(site, req, captures)
                if stop is not None:
                    tracer.stop()
                else:
                    out = self.nn.output.save()
        captures = {k: v for k, v in captures.items()}
        if out is None:
            return ForwardResult(None, captures, None)
        kv = getattr(out, "past_key_values", None) if req.use_cache else None
        return ForwardResult(out.logits if req.need_logits else None, captures, kv)
