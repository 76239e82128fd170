"""Plain transformers + PyTorch hooks: what a researcher would write by hand to read the activations behind
interplab's sites. No interplab code: the parity tests compare both backends against it."""
from __future__ import annotations

import importlib

import torch


def _parts(hf):
    """Per-family module names, written out here (not read from interplab.models.layout, which is under test)."""
    if hf.config.model_type == "gpt2":
        return dict(blocks=hf.transformer.h, final=hf.transformer.ln_f, ln1="ln_1", ln2="ln_2", attn="attn",
                    down="mlp.c_proj")
    ln2 = "pre_feedforward_layernorm" if hf.config.model_type.startswith("gemma") else "post_attention_layernorm"
    return dict(blocks=hf.model.layers, final=hf.model.norm, ln1="input_layernorm", ln2=ln2, attn="self_attn",
                down="mlp.down_proj")


def _get(module, path):
    for part in path.split("."):
        module = getattr(module, part)
    return module


def scale_of(norm, x):
    """The norm's denominator sqrt(mean(c^2) + eps), c = x (RMSNorm) or x - mean(x) (LayerNorm): TL's hook_scale."""
    eps = getattr(norm, "variance_epsilon", None) or norm.eps
    c = x - x.mean(-1, keepdim=True) if isinstance(norm, torch.nn.LayerNorm) else x
    return (c.pow(2).mean(-1, keepdim=True) + eps).sqrt()


def reference_sites(hf, input_ids, attention_mask, position_ids, layers) -> dict[str, torch.Tensor]:
    """Every new site of `layers` (and final_norm_scale) from one eager forward of `hf` with hooks."""
    P, cfg = _parts(hf), hf.config
    gpt2 = cfg.model_type == "gpt2"
    n_heads = cfg.num_attention_heads
    d_head = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_heads
    out, raw, handles = {}, {}, []

    def save_in(key):
        return lambda mod, args: raw.__setitem__(key, args[0].detach().clone())

    def save_out(key):
        return lambda mod, args, o: raw.__setitem__(key, (o[0] if isinstance(o, tuple) else o).detach().clone())

    def save_attn_kwargs(key):
        return lambda mod, args, kwargs: raw.__setitem__(key, kwargs)

    for L in layers:
        b = P["blocks"][L]
        handles += [_get(b, P["ln1"]).register_forward_pre_hook(save_in(f"ln1_in.{L}")),
                    _get(b, P["ln2"]).register_forward_pre_hook(save_in(f"ln2_in.{L}")),
                    _get(b, P["down"]).register_forward_pre_hook(save_in(f"down_in.{L}")),
                    _get(b, P["attn"]).register_forward_pre_hook(save_attn_kwargs(f"attn_kw.{L}"),
                                                                 with_kwargs=True)]
        attn = _get(b, P["attn"])
        if gpt2:
            handles.append(attn.c_attn.register_forward_hook(save_out(f"qkv.{L}")))
        else:
            for n in "qkv":
                handles.append(getattr(attn, f"{n}_proj").register_forward_hook(save_out(f"{n}.{L}")))
            for n in ("q_norm", "k_norm"):
                if hasattr(attn, n):
                    handles.append(getattr(attn, n).register_forward_hook(save_out(f"{n}.{L}")))
    handles.append(P["final"].register_forward_pre_hook(save_in("final_in")))
    try:
        with torch.no_grad():
            logits = hf(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    finally:
        for h in handles:
            h.remove()
    modeling = importlib.import_module(type(hf).__module__)
    for L in layers:
        b = P["blocks"][L]
        out[f"ln1_scale.{L}"] = scale_of(_get(b, P["ln1"]), raw[f"ln1_in.{L}"])
        out[f"resid_mid.{L}"] = raw[f"ln2_in.{L}"]
        out[f"ln2_scale.{L}"] = scale_of(_get(b, P["ln2"]), raw[f"ln2_in.{L}"])
        out[f"mlp_hidden.{L}"] = raw[f"down_in.{L}"]
        if gpt2:
            q, k, v = raw[f"qkv.{L}"].split(cfg.hidden_size, dim=-1)
        else:
            q, k, v = raw[f"q.{L}"], raw[f"k.{L}"], raw[f"v.{L}"]
        q, k, v = (t.reshape(*t.shape[:-1], -1, d_head) for t in (q, k, v))
        out[f"attn_q.{L}"], out[f"attn_k.{L}"], out[f"attn_v.{L}"] = q, k, v
        kw, attn = raw[f"attn_kw.{L}"], _get(b, P["attn"])
        qr, kr = q.transpose(1, 2), k.transpose(1, 2)
        if f"q_norm.{L}" in raw:   # Gemma-3: QK-norm before RoPE
            qr, kr = raw[f"q_norm.{L}"], raw[f"k_norm.{L}"]
        if not gpt2:
            cos, sin = kw["position_embeddings"]
            qr, kr = modeling.apply_rotary_pos_emb(qr, kr, cos, sin)
        out[f"attn_rot_q.{L}"], out[f"attn_rot_k.{L}"] = qr.transpose(1, 2), kr.transpose(1, 2)
        keys = kr.repeat_interleave(qr.shape[1] // kr.shape[1], dim=1)   # GQA: query head h reads KV head h // g
        scores = torch.matmul(qr, keys.transpose(-1, -2)) * attn.scaling
        out[f"attn_scores.{L}"] = scores + kw["attention_mask"][..., :scores.shape[-1]]
    out["final_norm_scale"] = scale_of(P["final"], raw["final_in"])
    out["logits"] = logits
    return out
