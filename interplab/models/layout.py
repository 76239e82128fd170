"""Hugging Face module layouts: the one place that knows where a causal LM keeps its blocks, attention, MLP, norms
and unembedding. The nnsight backend reads activations through these paths and `weights.py` reads weights."""
from __future__ import annotations

import difflib
from dataclasses import dataclass

from interplab.core.errors import InterplabError, SiteError


@dataclass(frozen=True)
class ModulePaths:
    """Attribute paths into a causal-LM module tree (relative to the top-level model; block-level ones relative to
    a block)."""

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
    # The norm before attention (ln1) and before the MLP (ln2, whose input is resid_mid); the q/k/v projections
    # (None where one fused projection `qkv` holds all three, GPT-2's c_attn: [q | k | v] along its last axis); the
    # MLP's output projection, whose input is mlp_hidden; whether q/k are rotated (RoPE) inside attention.
    ln1: str = "input_layernorm"
    ln2: str = "post_attention_layernorm"
    q_proj: str | None = "self_attn.q_proj"
    k_proj: str | None = "self_attn.k_proj"
    v_proj: str | None = "self_attn.v_proj"
    qkv: str | None = None
    mlp_down: str = "mlp.down_proj"
    rotary: bool = True


LLAMA_LIKE = ModulePaths(layers="model.layers", attn="self_attn", o_proj="self_attn.o_proj", mlp="mlp",
                         final_norm="model.norm")
GEMMA_SANDWICH = ModulePaths(layers="model.layers", attn="self_attn", o_proj="self_attn.o_proj", mlp="mlp",
                             final_norm="model.norm", attn_out="post_attention_layernorm",
                             mlp_out="post_feedforward_layernorm", ln2="pre_feedforward_layernorm")
GPT2 = ModulePaths(layers="transformer.h", attn="attn", o_proj="attn.c_proj", mlp="mlp", final_norm="transformer.ln_f",
                   style="gpt2", ln1="ln_1", ln2="ln_2", q_proj=None, k_proj=None, v_proj=None, qkv="attn.c_attn",
                   mlp_down="mlp.c_proj", rotary=False)
PHI3 = ModulePaths(layers="model.layers", attn="self_attn", o_proj="self_attn.o_proj", mlp="mlp",
                   final_norm="model.norm", q_proj=None, k_proj=None, v_proj=None, qkv="self_attn.qkv_proj")
PATHS_BY_MODEL_TYPE = {"gpt2": GPT2, "llama": LLAMA_LIKE, "qwen2": LLAMA_LIKE, "mistral": LLAMA_LIKE,
                       "qwen3": LLAMA_LIKE, "gemma": LLAMA_LIKE, "gemma2": GEMMA_SANDWICH,
                       "gemma3_text": GEMMA_SANDWICH,
                       "olmo": LLAMA_LIKE,
                       "phi3": PHI3}


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


# ------------------------------------------------------------------------------------ norms (the *_scale sites)
@dataclass(frozen=True)
class NormSpec:
    """How a norm module normalises: "rms" (x / sqrt(mean x^2 + eps)) or "layer" (centred first), its eps, and
    whether its weight is stored as an offset from 1 (Gemma: output * (1 + w))."""

    kind: str
    eps: float
    offset: bool = False


def norm_spec(module) -> NormSpec:
    """The NormSpec of a norm module of a supported family (the module itself, not a TransformerLens wrapper)."""
    import torch

    module = getattr(module, "original_component", None) or module
    name = type(module).__name__
    if isinstance(module, torch.nn.LayerNorm):
        return NormSpec("layer", float(module.eps))
    if "RMSNorm" in name:
        eps = getattr(module, "variance_epsilon", None)
        eps = getattr(module, "eps", 1e-6) if eps is None else eps
        return NormSpec("rms", float(eps), offset=name.startswith("Gemma"))
    raise InterplabError(f"interplab does not know how {name} normalises (the *_scale sites); read it through a "
                         "module site instead ('module:PATH')")


# ------------------------------------------------------------------------------- module sites (the escape hatch)
def _inner(module):
    """The Hugging Face module a TransformerLens wrapper stands for (the module itself when unwrapped): the
    bridge replaces a submodule by a wrapper that is called in its place and keeps it as `_original_component`."""
    return module._modules.get("_original_component", module)


def _is_hook_point(module) -> bool:
    return type(module).__name__ == "HookPoint"


def resolve_module(hf_model, path: str):
    """The module at `path` (Hugging Face names, e.g. "model.layers.3.mlp.act_fn") as it is called in a forward:
    on the bridge backend the TransformerLens wrapper that replaced it, on nnsight the module itself."""
    cur = hf_model
    for i, part in enumerate(path.split(".")):
        child = _inner(cur)._modules.get(part)
        if child is None or part == "_original_component" or _is_hook_point(child):
            close = difflib.get_close_matches(path, module_paths(hf_model), n=5, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise SiteError(f"the Hugging Face model has no module {path!r} (no {part!r} under "
                            f"{'.'.join(path.split('.')[:i]) or 'the model'}){hint} model.module_paths() lists "
                            "every module path")
        cur = child
    return cur


def module_paths(hf_model) -> list[str]:
    """Every module path of the Hugging Face model, in Hugging Face's own names (wrappers looked through)."""
    out: list[str] = []

    def walk(module, prefix: str) -> None:
        for name, child in _inner(module).named_children():
            if name == "_original_component" or _is_hook_point(child):
                continue
            path = f"{prefix}.{name}" if prefix else name
            out.append(path)
            walk(child, path)
    walk(hf_model, "")
    return out


def module_layer(hf_model, path: str) -> int | None:
    """The block a module path lies in (None outside the blocks: embedding, final norm, unembedding, or a family
    without a module map)."""
    try:
        prefix = paths_for(hf_model).layers + "."
    except InterplabError:
        return None
    if not path.startswith(prefix):
        return None
    head = path[len(prefix):].split(".", 1)[0]
    return int(head) if head.isdigit() else None
