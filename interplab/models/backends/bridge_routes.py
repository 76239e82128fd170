"""Which TransformerBridge components a forward pass runs, and which run as the Hugging Face modules they wrap.

TransformerBridge replaces modules of the Hugging Face model by wrappers that fire hook points around the wrapped
module (and, for attention, re-implement it step by step so that q/k/v, scores and pattern have hook points). On
SmolLM2 that costs ~1.5x a plain forward per decoded token, with no hook attached anywhere.

A component whose wrappers carry no hook at all (none of interplab's for this forward, none a user attached with
`bridge.hooks(...)` or `add_hook`, no PyTorch hook on any module inside it) fires nothing, so for one forward its
place in the Hugging Face model is given back to the module it wraps (its inner wrappers likewise), and restored
afterwards. A site a capture or edit names still runs through its TransformerLens hook point: its component keeps
every wrapper. The numbers do not change: this is done only for wrapper types whose forward is the wrapped module's
own (linear, embedding, unembedding, rotary, gated MLP, the block) or, for the norm, calls it when no hook edits the
scale, and for the RoPE attention re-implementation, which performs the same operations in the same order as
transformers' eager attention; such forwards run with eager attention, and tests/hook_layer/test_bridge_routes.py
checks the outputs bit for bit on each supported family. Anything else (GPT-2's joint-QKV attention and its
Python LayerNorm, TransformerLens's compatibility mode or processed weights, its split-QKV / attention-result
options) always runs wrapped."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

# Exact types (a subclass may compute differently).
_DELEGATING = ("BlockBridge", "LinearBridge", "EmbeddingBridge", "UnembeddingBridge", "RotaryEmbeddingBridge",
               "GatedMLPBridge", "PositionEmbeddingsAttentionBridge")
_NORMS = ("RMSNormalizationBridge", "NormalizationBridge")
# TransformerLens options that change what its wrappers compute.
_CFG_FLAGS = ("use_attn_result", "use_split_qkv_input", "use_attn_in", "use_hook_mlp_in", "layer_norm_folding",
              "ungroup_grouped_query_attention")
_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


@dataclass
class _Unit:
    """A wrapper that sits directly in the Hugging Face model tree (a block, the embedding, the final norm, ...)."""
    parent: torch.nn.Module
    key: str
    component: torch.nn.Module
    swaps: list[tuple[dict, str, torch.nn.Module]] = field(default_factory=list)  # (parent._modules, key, wrapper)
    hook_dicts: list[dict] = field(default_factory=list)
    own_hooks: int = 0   # interplab's permanent hooks inside it
    eligible: bool = True

    def hooked(self) -> bool:
        """Any hook inside it that is not bookkeeping: interplab's own permanent ones, and the capture hooks
        TransformerLens's block wires on its norms at its first forward (they read nothing unless one of
        `_CFG_FLAGS` is set)."""
        internal = self.own_hooks + len(getattr(self.component, "_capture_hook_handles", ()))
        return sum(map(len, self.hook_dicts)) > internal


class BridgeRoutes:
    def __init__(self, bridge, hf_model: torch.nn.Module, internal_hooks: dict[int, int]):
        """internal_hooks: id(wrapper) -> how many hooks interplab itself keeps on it permanently."""
        self.bridge = bridge
        self.hf_model = hf_model
        self._internal_own = internal_hooks
        self._units: list[_Unit] | None = None
        self.enabled = True   # False: every component runs wrapped (the reference the tests compare against)

    def _build(self) -> list[_Unit]:
        from transformer_lens.model_bridge.generalized_components.base import GeneralizedComponent

        units: list[_Unit] = []

        def walk(mod: torch.nn.Module) -> None:
            for key, child in mod._modules.items():
                if isinstance(child, GeneralizedComponent):
                    u = _unit(mod, key, child, GeneralizedComponent)
                    u.own_hooks = sum(self._internal_own.get(id(w), 0) for _, _, w in u.swaps)
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
        return not (torch.nn.modules.module._global_forward_hooks
                    or torch.nn.modules.module._global_forward_pre_hooks
                    or torch.nn.modules.module._global_backward_hooks
                    or torch.nn.modules.module._global_backward_pre_hooks)

    def unhooked(self) -> list[_Unit]:
        """The units that may run as plain Hugging Face modules in a forward starting now (hooks already added)."""
        if not self.enabled or not self._allowed():
            return []
        if self._units is None:
            self._units = self._build()
        out = []
        for u in self._units:
            if u.parent._modules.get(u.key) is not u.component:   # the model was rebuilt around us: start over
                self._units = None
                return self.unhooked()
            if u.eligible and not u.hooked():
                out.append(u)
        return out

    @contextlib.contextmanager
    def native(self, units: list[_Unit]):
        swaps = [s for u in units for s in u.swaps]   # outermost first
        n = 0
        try:
            for modules, key, wrapper in swaps:
                modules[key] = wrapper._modules["_original_component"]
                n += 1
            yield
        finally:
            for modules, key, wrapper in swaps[:n]:
                modules[key] = wrapper


def _unit(parent, key, comp, base) -> _Unit:
    u = _Unit(parent, key, comp)
    u.hook_dicts = [getattr(m, d) for m in comp.modules() for d in _HOOK_DICTS]

    def add(modules: dict, k: str, wrapper) -> None:
        u.swaps.append((modules, k, wrapper))
        name = type(wrapper).__name__
        if name in _NORMS:
            ok = (getattr(wrapper, "use_native_layernorm_autograd", False)
                  and not getattr(wrapper.config, "layer_norm_folding", False))
        else:
            ok = name in _DELEGATING
        orig = wrapper._modules.get("_original_component")
        u.eligible &= bool(ok) and orig is not None
        if orig is not None:
            inner(orig)

    def inner(mod) -> None:
        # The wrapped module's children: further wrappers (swapped too) or plain modules (searched).
        for k, child in mod._modules.items():
            if isinstance(child, base):
                add(mod._modules, k, child)
            elif child is not None:
                inner(child)
    add(parent._modules, key, comp)
    return u
