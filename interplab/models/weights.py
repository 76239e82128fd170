"""Weights a method reads, in TransformerLens's x @ W convention, float64 on CPU, whatever the checkpoint's layout:
per-head W_Q/W_K/W_V/W_O, MLP in/out, the unembedding and the final norm. `LabModel` exposes these, so no probe
reaches into `hf_model` itself."""
from __future__ import annotations

import torch

from interplab.models.layout import get_module, paths_for


def _w(module) -> torch.Tensor:
    return module.weight.detach().double().cpu()


def attention_weights(hf_model, n_heads: int, n_kv_heads: int, d_head: int) -> dict[str, torch.Tensor]:
    """W_Q [L, H, d_model, d_head], W_K / W_V [L, H_kv, d_model, d_head], W_O [L, H, d_head, d_model]."""
    p = paths_for(hf_model)
    H, Hkv, dh = n_heads, n_kv_heads, d_head
    out: dict[str, list] = {"W_Q": [], "W_K": [], "W_V": [], "W_O": []}
    with torch.no_grad():
        for block in get_module(hf_model, p.layers):
            attn = get_module(block, p.attn)
            if p.style == "gpt2":
                w = _w(attn.c_attn)  # Conv1D [d, 3d], x @ w
                d = w.shape[0]
                for name, part in zip(("W_Q", "W_K", "W_V"), w.split(H * dh, dim=1)):
                    out[name].append(part.reshape(d, H, dh).permute(1, 0, 2))
                out["W_O"].append(_w(attn.c_proj).reshape(H, dh, d))
            else:
                q, k, v, o = _w(attn.q_proj), _w(attn.k_proj), _w(attn.v_proj), _w(attn.o_proj)
                d = q.shape[1]
                out["W_Q"].append(q.reshape(H, dh, d).transpose(1, 2))
                out["W_K"].append(k.reshape(Hkv, dh, d).transpose(1, 2))
                out["W_V"].append(v.reshape(Hkv, dh, d).transpose(1, 2))
                out["W_O"].append(o.T.reshape(H, dh, d))
    return {k: torch.stack(v) for k, v in out.items()}


def mlp_weights(hf_model) -> dict[str, torch.Tensor]:
    """W_in [L, d_model, d_mlp] and W_out [L, d_mlp, d_model]; gated MLPs (Llama-style) add W_gate [L, d_model, d_mlp]."""
    p = paths_for(hf_model)
    out: dict[str, list] = {"W_in": [], "W_out": []}
    with torch.no_grad():
        for block in get_module(hf_model, p.layers):
            mlp = get_module(block, p.mlp)
            if p.style == "gpt2":
                out["W_in"].append(_w(mlp.c_fc))
                out["W_out"].append(_w(mlp.c_proj))
            else:
                out["W_in"].append(_w(mlp.up_proj).T)
                out["W_out"].append(_w(mlp.down_proj).T)
                out.setdefault("W_gate", []).append(_w(mlp.gate_proj).T)
    return {k: torch.stack(v) for k, v in out.items()}


def final_norm(hf_model) -> torch.nn.Module:
    """The checkpoint's own final norm module (applied to the last residual stream before the unembedding). The
    TransformerLens bridge wraps modules in place; its public `original_component` is the module itself."""
    m = get_module(hf_model, paths_for(hf_model).final_norm)
    return getattr(m, "original_component", None) or m


def unembedding(hf_model) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(W_U [d_model, d_vocab], b_U [d_vocab] or None), float64 on CPU."""
    head = hf_model.get_output_embeddings()
    b = getattr(head, "bias", None)
    return _w(head).T, (b.detach().double().cpu() if b is not None else None)
