"""Which TransformerBridge components a forward runs wrapped, and which as the modules they wrap.

TransformerBridge puts wrappers in place of the Hugging Face model's modules. They fire hook points
around the wrapped module, and the attention wrapper re-implements attention step by step so that
q/k/v, scores and pattern have hook points. With no hook attached anywhere, that made a decoded
token of SmolLM2 cost 1.4-1.6x a plain one (BENCHMARKS.md, issue 49).

A component with no hook inside it (none of interplab's for this forward, none a user attached with
`bridge.hooks(...)` or `add_hook`, no PyTorch hook on any of its modules) fires nothing. For one
forward its place in the model goes back to the module it wraps (its inner wrappers likewise), and
the wrappers return afterwards. A site that a capture or edit names keeps its component wrapped, so
it still runs through its TransformerLens hook point.

No number changes. This is done only for wrappers whose forward is the wrapped module's own (linear,
embedding, unembedding, rotary, gated MLP, block), the norm wrapper that calls the wrapped norm when
no hook edits its scale, and the RoPE attention re-implementation, which does transformers' eager
attention operations in the same order. Forwards that use this run with eager attention.
tests/hook_layer/test_bridge_routes.py checks the outputs bit for bit on every supported family.
Everything else always runs wrapped: GPT-2's joint-QKV attention and its LayerNorm
(TransformerLens's own), and TransformerLens's compatibility mode, processed weights and
split-QKV / attention-result options."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

# TransformerLens options that change what its wrappers compute.
_CFG_FLAGS = ("use_attn_result", "use_split_qkv_input", "use_attn_in", "use_hook_mlp_in",
              "layer_norm_folding", "ungroup_grouped_query_attention")
_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks")


def _wrapper_types():
    from transformer_lens.model_bridge import generalized_components as g
    from transformer_lens.model_bridge.generalized_components.base import (
        GeneralizedComponent,
    )

    # Exact types: a subclass may compute differently.
    delegating = (g.BlockBridge, g.LinearBridge, g.EmbeddingBridge, g.UnembeddingBridge,
                  g.RotaryEmbeddingBridge, g.GatedMLPBridge, g.PositionEmbeddingsAttentionBridge)
    return GeneralizedComponent, delegating, (g.RMSNormalizationBridge, g.NormalizationBridge)


@dataclass
class _Unit:
    """A wrapper that sits directly in the Hugging Face model (a block, the embedding, ...)."""
    parent: torch.nn.Module
    key: str
    component: torch.nn.Module
    # (the _modules dict holding it, its key, the wrapper), outermost first
    swaps: list[tuple[dict, str, torch.nn.Module]] = field(default_factory=list)
    hook_dicts: list[dict] = field(default_factory=list)
    own_hooks: int = 0   # interplab's permanent hooks inside it
    eligible: bool = True

    def hooked(self) -> bool:
        """A hook inside it that is not bookkeeping. Bookkeeping: interplab's permanent hooks and
        the capture hooks TransformerLens's block puts on its norms at its first forward (they read
        nothing unless one of `_CFG_FLAGS` is set)."""
        internal = self.own_hooks + len(getattr(self.component, "_capture_hook_handles", ()))
        return sum(map(len, self.hook_dicts)) > internal


class BridgeRoutes:
    def __init__(self, bridge, hf_model: torch.nn.Module, own_hooks: dict[int, int]):
        """own_hooks: id(wrapper) -> how many hooks interplab keeps on it permanently."""
        self.bridge = bridge
        self.hf_model = hf_model
        self._own_hooks = own_hooks
        self._units: list[_Unit] | None = None
        self.enabled = True   # False: all stays wrapped (the reference the tests compare against)

    def _build(self) -> list[_Unit]:
        base, delegating, norms = _wrapper_types()
        units: list[_Unit] = []

        def walk(mod: torch.nn.Module) -> None:
            for key, child in mod._modules.items():
                if isinstance(child, base):
                    u = _unit(mod, key, child, base, delegating, norms)
                    u.own_hooks = sum(self._own_hooks.get(id(w), 0) for _, _, w in u.swaps)
                    units.append(u)
                elif child is not None:
                    walk(child)
        walk(self.hf_model)
        return units

    def _allowed(self) -> bool:
        b, cfg = self.bridge, self.bridge.cfg
        if getattr(b, "compatibility_mode", False) or getattr(b, "_weights_processed", False):
            return False
        if any(getattr(cfg, f, False) for f in _CFG_FLAGS):
            return False
        return not any(getattr(torch.nn.modules.module, h) for h in _GLOBAL_HOOKS)

    def unhooked(self) -> list[_Unit]:
        """The units that may run unwrapped in a forward starting now (its hooks already added)."""
        if not self.enabled or not self._allowed():
            return []
        if self._units is None:
            self._units = self._build()
        out = []
        for u in self._units:
            if u.parent._modules.get(u.key) is not u.component:   # someone rebuilt the model
                self._units = None
                return self.unhooked()
            if u.eligible and not u.hooked():
                out.append(u)
        return out

    @contextlib.contextmanager
    def unwrapped(self, units: list[_Unit]):
        swaps = [s for u in units for s in u.swaps]
        n = 0
        try:
            for modules, key, wrapper in swaps:
                modules[key] = wrapper._modules["_original_component"]
                n += 1
            yield
        finally:
            for modules, key, wrapper in swaps[:n]:
                modules[key] = wrapper


def _unit(parent, key, comp, base, delegating, norms) -> _Unit:
    u = _Unit(parent, key, comp)
    u.hook_dicts = [getattr(m, d) for m in comp.modules() for d in _HOOK_DICTS]

    def add(modules: dict, k: str, wrapper) -> None:
        u.swaps.append((modules, k, wrapper))
        if type(wrapper) in norms:
            ok = getattr(wrapper, "use_native_layernorm_autograd", False)
        else:
            ok = type(wrapper) in delegating
        orig = wrapper._modules.get("_original_component")
        u.eligible &= bool(ok) and orig is not None
        if orig is not None:
            inner(orig)

    def inner(mod) -> None:
        # The wrapped module's children: more wrappers (unwrapped too) or plain modules (searched).
        for k, child in mod._modules.items():
            if isinstance(child, base):
                add(mod._modules, k, child)
            elif child is not None:
                inner(child)
    add(parent._modules, key, comp)
    return u
