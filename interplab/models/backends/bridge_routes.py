"""Which TransformerBridge components a forward runs wrapped, and which as the modules they wrap.

TransformerBridge puts wrappers in place of the Hugging Face model's modules. They fire hook points
around the wrapped module, and the attention wrapper re-implements attention step by step so that
q/k/v, scores and pattern have hook points. With no hook attached anywhere, that made a decoded
token of SmolLM2 cost 1.4-1.6x a plain one (BENCHMARKS.md, issue 49).

A wrapper with no hook inside it (none of interplab's for this forward, none a user attached with
`bridge.hooks(...)` or `add_hook`, no PyTorch hook on any of its modules) fires nothing. For one
forward its place in the model goes back to the module it wraps (its inner wrappers likewise), and
the wrappers return afterwards. A wrapper that holds a hook stays, and the wrappers inside the
module it wraps are decided the same way: a site that a capture or edit names still runs through
its TransformerLens hook point (resid_post keeps its block's wrapper, whose attention and MLP may
run unwrapped).

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
class _Node:
    """A wrapper in the Hugging Face model and the wrappers inside the module it wraps."""
    modules: dict        # the `_modules` dict that holds it
    key: str
    wrapper: torch.nn.Module
    top: torch.nn.Module   # the outermost wrapper around it (a block, the embedding, ...)
    children: list[_Node] = field(default_factory=list)
    swaps: list[tuple[dict, str, torch.nn.Module]] = field(default_factory=list)  # its subtree's
    hook_dicts: list[dict] = field(default_factory=list)                           # its subtree's
    dict_ids: frozenset[int] = frozenset()
    own_hooks: int = 0       # interplab's permanent hooks in its subtree
    eligible: bool = True    # every wrapper in its subtree may run unwrapped

    def hooked(self) -> bool:
        """A hook in its subtree that is not bookkeeping. Bookkeeping: interplab's permanent hooks
        and the capture hooks TransformerLens's block puts on its norms at its first forward (they
        read nothing unless one of `_CFG_FLAGS` is set)."""
        n = sum(map(len, self.hook_dicts))
        if n <= self.own_hooks:
            return False
        handles = getattr(self.top, "_capture_hook_handles", ())
        tl = sum(id(h.hooks_dict_ref()) in self.dict_ids for h in handles)
        return n > self.own_hooks + tl

    def collect(self, out: list) -> None:
        """The swaps that leave as much as possible unwrapped: all of this subtree if no hook is in
        it, else (this wrapper stays, with its hook points) what its children's subtrees allow."""
        if self.eligible and not self.hooked():
            out.extend(self.swaps)
            return
        for c in self.children:
            c.collect(out)


class BridgeRoutes:
    def __init__(self, bridge, hf_model: torch.nn.Module, own_hooks: dict[int, int]):
        """own_hooks: id(wrapper) -> how many hooks interplab keeps on it permanently."""
        self.bridge = bridge
        self.hf_model = hf_model
        self._own_hooks = own_hooks
        self._tops: list[_Node] | None = None
        self.enabled = True   # False: all stays wrapped (the reference the tests compare against)

    def _build(self) -> list[_Node]:
        base, delegating, norms = _wrapper_types()
        tops: list[_Node] = []

        def walk(mod: torch.nn.Module) -> None:
            for key, child in mod._modules.items():
                if isinstance(child, base):
                    tops.append(_node(mod._modules, key, child, child, base, delegating, norms,
                                      self._own_hooks))
                elif child is not None:
                    walk(child)
        walk(self.hf_model)
        return tops

    def _allowed(self) -> bool:
        b, cfg = self.bridge, self.bridge.cfg
        if getattr(b, "compatibility_mode", False) or getattr(b, "_weights_processed", False):
            return False
        if any(getattr(cfg, f, False) for f in _CFG_FLAGS):
            return False
        return not any(getattr(torch.nn.modules.module, h) for h in _GLOBAL_HOOKS)

    def unhooked(self) -> list[tuple[dict, str, torch.nn.Module]]:
        """The wrappers that may run unwrapped in a forward starting now (its hooks already added),
        as (`_modules` dict, key, wrapper), outermost first."""
        if not self.enabled or not self._allowed():
            return []
        for _ in range(2):
            if self._tops is None:
                self._tops = self._build()
            out: list = []
            for t in self._tops:
                t.collect(out)
            # A module put in a wrapper's place since (e.g. a LoRA layer around it) must stay there:
            # map the model again.
            if all(t.modules.get(t.key) is t.wrapper for t in self._tops) \
                    and all(mods.get(k) is w for mods, k, w in out):
                return out
            self._tops = None
        return []

    @contextlib.contextmanager
    def unwrapped(self, swaps: list[tuple[dict, str, torch.nn.Module]]):
        n = 0
        try:
            for modules, key, wrapper in swaps:
                modules[key] = wrapper._modules["_original_component"]
                n += 1
            yield
        finally:
            for modules, key, wrapper in swaps[:n]:
                modules[key] = wrapper


def _node(modules, key, wrapper, top, base, delegating, norms, own_hooks) -> _Node:
    node = _Node(modules, key, wrapper, top)
    node.hook_dicts = [getattr(m, d) for m in wrapper.modules() for d in _HOOK_DICTS]
    node.dict_ids = frozenset(map(id, node.hook_dicts))
    node.own_hooks = sum(own_hooks.get(id(m), 0) for m in wrapper.modules())
    if type(wrapper) in norms:
        ok = getattr(wrapper, "use_native_layernorm_autograd", False)
    else:
        ok = type(wrapper) in delegating
    orig = wrapper._modules.get("_original_component")
    node.eligible = bool(ok) and orig is not None
    node.swaps.append((modules, key, wrapper))

    def inner(mod) -> None:
        # The wrapped module's children: more wrappers (nodes) or plain modules (searched).
        for k, child in mod._modules.items():
            if isinstance(child, base):
                c = _node(mod._modules, k, child, top, base, delegating, norms, own_hooks)
                node.children.append(c)
                node.swaps.extend(c.swaps)
                node.eligible &= c.eligible
            elif child is not None:
                inner(child)
    if orig is not None:
        inner(orig)
    return node
