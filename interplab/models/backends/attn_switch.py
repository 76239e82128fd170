"""Switching a transformers model's attention implementation for one forward pass."""
from __future__ import annotations

import contextlib

import torch


class AttentionSwitch:
    """`with switch.using("eager"): model(...)` runs that forward with another implementation.

    transformers' `set_attn_implementation` validates the request, then walks every module to find
    sub-models: 3.4 ms for a switch and its undo on SmolLM2 under TransformerBridge (its wrappers
    triple the module count), about 4 % of a decoded token. All it changes is the implementation
    recorded on each config, so it runs once per target and its effect is replayed after that."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self._effects: dict[str, list[tuple[object, str]]] = {}

    def _configs(self) -> list:
        """Every config that `set_attn_implementation` may write to (sub-configs included)."""
        from transformers import PreTrainedModel

        todo = [m.config for m in self.model.modules() if isinstance(m, PreTrainedModel)]
        seen: dict[int, object] = {}
        while todo:
            cfg = todo.pop()
            if id(cfg) in seen or not hasattr(cfg, "_attn_implementation_internal"):
                continue
            seen[id(cfg)] = cfg
            todo.extend(c for k in getattr(cfg, "sub_configs", {})
                        if (c := getattr(cfg, k, None)) is not None)
        return list(seen.values())

    def _effect(self, impl: str) -> list[tuple[object, str]]:
        if impl not in self._effects:
            configs = self._configs()
            before = [c._attn_implementation_internal for c in configs]
            try:
                self.model.set_attn_implementation(impl)
                self._effects[impl] = [(c, c._attn_implementation_internal) for c in configs]
            finally:
                for c, v in zip(configs, before):
                    c._attn_implementation_internal = v
        return self._effects[impl]

    @contextlib.contextmanager
    def using(self, impl: str):
        if getattr(self.model.config, "_attn_implementation", None) == impl:
            yield
            return
        effect = self._effect(impl)
        before = [c._attn_implementation_internal for c, _ in effect]
        for c, v in effect:
            c._attn_implementation_internal = v
        try:
            yield
        finally:
            for (c, _), v in zip(effect, before):
                c._attn_implementation_internal = v
