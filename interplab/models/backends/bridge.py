"""TransformerLens 3.9 TransformerBridge backend: canonical sites -> TL hook names."""
from __future__ import annotations

import contextlib
import itertools
import warnings

import torch

from interplab.models.backends.attn_switch import AttentionSwitch
from interplab.models.backends.base import (ForwardRequest, ForwardResult, StopForward, apply_edits,
                                            hf_forward_kwargs, keep)
from interplab.models.backends.bridge_routes import BridgeRoutes
from interplab.models.backends.module_hooks import module_hooks
from interplab.core.errors import SiteError
from interplab.core.sites import SCALE_KINDS, SITE_KINDS, Site

# Canonical site -> TransformerLens hook; a tuple lists candidates, the first the model has wins (models without
# rotary embeddings have no hook_rot_q/k: there the dot product reads hook_q/k themselves).
TL_HOOKS = {
    "resid_pre": "blocks.{L}.hook_in",
    "ln1_scale": "blocks.{L}.ln1.hook_scale",
    "attn_q": "blocks.{L}.attn.hook_q",
    "attn_k": "blocks.{L}.attn.hook_k",
    "attn_v": "blocks.{L}.attn.hook_v",
    "attn_rot_q": ("blocks.{L}.attn.hook_rot_q", "blocks.{L}.attn.hook_q"),
    "attn_rot_k": ("blocks.{L}.attn.hook_rot_k", "blocks.{L}.attn.hook_k"),
    "attn_scores": "blocks.{L}.attn.hook_attn_scores",
    "attn_z": "blocks.{L}.attn.hook_z",
    "attn_pattern": "blocks.{L}.attn.hook_pattern",
    "attn_out": "blocks.{L}.hook_attn_out",
    "resid_mid": "blocks.{L}.hook_resid_mid",   # = ln2.hook_in; edited in place (base._edit_in_place)
    "ln2_scale": "blocks.{L}.ln2.hook_scale",
    "mlp_hidden": "blocks.{L}.mlp.hook_post",   # = the down projection's input
    "mlp_out": "blocks.{L}.hook_mlp_out",
    "resid_post": "blocks.{L}.hook_out",
    "final_norm_scale": "ln_final.hook_scale",
    "final_norm": "ln_final.hook_out",
    "logits": "unembed.hook_out",
}


def tl_hook_names(site: Site) -> tuple[str, ...]:
    names = TL_HOOKS[site.kind]
    return tuple(n.format(L=site.layer) for n in ((names,) if isinstance(names, str) else names))


def tl_hook_name(site: Site) -> str:
    return tl_hook_names(site)[0]


def _kv_cache_compat(module, args, kwargs):
    # TL 3.9's attention bridge reads `past_key_values`; transformers >= 5.x passes `cache`, so without this the
    # KV cache is never updated and cached generation silently attends to the new token only.
    if kwargs.get("past_key_values") is None and kwargs.get("cache") is not None:
        kwargs["past_key_values"] = kwargs["cache"]
    return args, kwargs


class BridgeBackend:
    name = "bridge"
    editable_kinds = frozenset(SITE_KINDS) | {"module"}

    def __init__(self, bridge):
        self.bridge = bridge
        self.hf_model = bridge.original_model
        self.n_layers = int(bridge.cfg.n_layers)
        own: dict[int, int] = {}
        for block in bridge.blocks:
            block.attn.register_forward_pre_hook(_kv_cache_compat, with_kwargs=True)
            own[id(block.attn)] = own.get(id(block.attn), 0) + 1
        self.routes = BridgeRoutes(bridge, self.hf_model, own)
        self.attention = AttentionSwitch(self.hf_model)
        self._points: dict[str, object] | None = None
        self._levels = itertools.count(1_000_000)  # above any context level TL's own `bridge.hooks` reaches

    def _hook_points(self) -> dict:
        """TL hook name (canonical or alias) -> HookPoint, resolved once per model. `bridge.hooks(...)` rebuilds the
        whole alias map for every hook it adds (~40 ms a forward on GPT-2 small, more per layer), which dominated
        KV-cached generation, where every decode step is a forward."""
        if self._points is None:
            from transformer_lens.model_bridge.bridge import build_alias_to_canonical_map

            hd = self.bridge.hook_dict
            aliases = build_alias_to_canonical_map(hd)
            self._points = {n: hd[aliases.get(n, n)] for n in {*hd, *aliases} if aliases.get(n, n) in hd}
        return self._points

    def _site_point(self, site: Site):
        points = self._hook_points()
        for name in tl_hook_names(site):
            if name in points:
                return points[name]
        raise SiteError(f"TransformerLens has no hook for {site.name} on this model (tried "
                        f"{', '.join(tl_hook_names(site))}); use backend='nnsight' or a module site")

    def forward(self, req: ForwardRequest) -> ForwardResult:
        captures: dict[str, torch.Tensor] = {}
        capture = set(req.capture)
        # Stop once every site of interest has fired (TL fires hook_pattern before hook_z, so "deepest" is not
        # a single well-defined hook here).
        pending = set(req.sites_in_order(self.n_layers)) if req.stop_site(self.n_layers) is not None else None
        fired: set[Site] = set()

        def make_hook(site: Site):
            def hook(x, hook):
                fired.add(site)
                x = apply_edits(site, x, req)
                if site in capture:
                    captures[site.name] = keep(x, req)
                if pending is not None:
                    pending.discard(site)
                    if not pending:
                        raise StopForward
                return x
            return hook

        points = [(self._site_point(s), make_hook(s)) for s in req.sites_in_order(self.n_layers)]
        level = next(self._levels)
        out = None
        try:  # the hooks of this forward only (its own level): hooks a user attached to the bridge survive
            for point, fn in points:
                point.add_hook(fn, dir="fwd", level=level)
            # A module site hooks a module of the Hugging Face model, wrapped or not: such forwards
            # keep every wrapper (what runs is then what always ran). The others give wrappers with
            # no hook inside back to the modules they wrap, with eager attention, which is what
            # TransformerLens's attention re-implements.
            plain = [] if req.module_sites() else self.routes.unhooked()
            eager = self.attention.using("eager") if plain else contextlib.nullcontext()
            with torch.set_grad_enabled(req.grad), _quiet_scale_edits(req), \
                    module_hooks(self.hf_model, req, captures, "bridge"), \
                    self.routes.unwrapped(plain), eager:
                try:
                    out = self.hf_model(**hf_forward_kwargs(req))
                except StopForward:
                    pass
        finally:
            for point in {id(p): p for p, _ in points}.values():
                point.remove_hooks(dir="fwd", level=level)
        silent = [s.name for s in req.sites_in_order(self.n_layers) if s not in fired]
        if silent:   # a hook TransformerLens declares but never calls on this architecture: not a silent no-op
            raise SiteError(f"TransformerLens's bridge never fired the hook of {', '.join(silent)} on this "
                            f"architecture ({type(self.hf_model).__name__}); use backend='nnsight'")
        if out is None:
            return ForwardResult(None, captures, None)
        kv = getattr(out, "past_key_values", None) if req.use_cache else None
        return ForwardResult(out.logits if req.need_logits else None, captures, kv)


@contextlib.contextmanager
def _quiet_scale_edits(req: ForwardRequest):
    """TransformerLens warns on every forward whose hook edits a norm's hook_scale ("output is reconstructed from
    the hooked values ... may differ at float-rounding scale"). An edit of ln1_scale/ln2_scale/final_norm_scale asks
    for exactly that reconstruction (docs/hook_layer.md), so the warning is dropped for such forwards only."""
    if not any(s.kind in SCALE_KINDS for s in req.edits):
        yield
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="A forward hook edited hook_scale")
        yield
