"""Hugging Face module layouts: the one place that knows where a causal LM keeps its blocks, attention, MLP, final
norm and unembedding. The nnsight backend reads activations through these paths and `weights.py` reads weights."""
from __future__ import annotations

from dataclasses import dataclass

from interplab.core.errors import InterplabError


@dataclass(frozen=True)
class ModulePaths:
    """Attribute paths into a causal-LM module tree (relative to the top-level model)."""

    layers: str
    attn: str
    o_proj: str
    mlp: str
    final_norm: str
    lm_head: str = "lm_head"
    style: str = "llama"  # "llama": q/k/v/o_proj + gate/up/down_proj; "gpt2": fused Conv1D c_attn/c_proj, c_fc
    # Where the block's attention / MLP contribution to the residual stream is read (relative to the block), when it
    # is not the attention's first output / the MLP's output: Gemma-2/3 norm both before they are added
    # ("sandwich" norms), so attn_out/mlp_out are the post-norms' outputs and resid_pre + attn_out + mlp_out =
    # resid_post holds on every architecture (as on the bridge, whose hook_attn_out/hook_mlp_out sit there too).
    attn_out: str | None = None
    mlp_out: str | None = None


LLAMA_LIKE = ModulePaths(layers="model.layers", attn="self_attn", o_proj="self_attn.o_proj", mlp="mlp",
                         final_norm="model.norm")
GEMMA_SANDWICH = ModulePaths(layers="model.layers", attn="self_attn", o_proj="self_attn.o_proj", mlp="mlp",
                             final_norm="model.norm", attn_out="post_attention_layernorm",
                             mlp_out="post_feedforward_layernorm")
GPT2 = ModulePaths(layers="transformer.h", attn="attn", o_proj="attn.c_proj", mlp="mlp", final_norm="transformer.ln_f",
                   style="gpt2")
PATHS_BY_MODEL_TYPE = {"gpt2": GPT2, "llama": LLAMA_LIKE, "qwen2": LLAMA_LIKE, "mistral": LLAMA_LIKE,
                       "qwen3": LLAMA_LIKE, "gemma": LLAMA_LIKE, "gemma2": GEMMA_SANDWICH,
                       "gemma3_text": GEMMA_SANDWICH,
                       "olmo": LLAMA_LIKE,
                       "phi3": LLAMA_LIKE}


def paths_for(hf_model) -> ModulePaths:
    mt = getattr(hf_model.config, "model_type", None)
    if mt not in PATHS_BY_MODEL_TYPE:
        raise InterplabError(
            f"interplab has no module map for model_type {mt!r} (known: {sorted(PATHS_BY_MODEL_TYPE)}); use "
            "backend='bridge' for activations, or add a ModulePaths entry in interplab/models/layout.py")
    return PATHS_BY_MODEL_TYPE[mt]


def get_module(root, path: str):
    for part in path.split("."):
        root = root[int(part)] if part.isdigit() else getattr(root, part)
    return root
