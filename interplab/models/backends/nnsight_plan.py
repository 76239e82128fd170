"""Where each canonical site lives for the nnsight backend, and how to read and write it there.

A site is read at a *location* (an envoy, an optional attribute chain into nnsight's `.source` of the module's
forward, and "input" or "output") through an *accessor*: `get(value, stash) -> x` and `put(value, x', stash) ->
value'`. Several sites can share one location (GPT-2's fused c_attn output holds q, k and v; the MLP norm's input is
resid_mid and feeds ln2_scale), so a plan reads each location once, in the order locations fire, and runs its
parts in site order.

Most sites are module inputs/outputs. Three kinds are not:
- attn_rot_q / attn_rot_k: the output of `apply_rotary_pos_emb(...)` inside the attention forward, read through
  nnsight's `.source` of the attention module (models without rotary embeddings read attn_q / attn_k instead);
- attn_scores: the input of the softmax inside the attention function (eager attention, as for attn_pattern),
  through `.source` of the attention module and then of the function it calls;
- *_scale: computed from the norm's input (the same float ops TransformerLens's hook_scale uses); an edited scale
  replaces the norm's output by the input re-normalised with it.
`.source` instruments the module's forward permanently (nnsight 0.8); the backend undoes that after each forward
(`unsource`), so forwards that do not read these sites pay nothing.

The accessors are nested functions of torch operations only: nnsight's remote path ships them by value."""
from __future__ import annotations

import importlib
import inspect
import weakref

from interplab.core.errors import SiteError
from interplab.core.sites import Site
from interplab.models.layout import NormSpec, get_module, norm_spec

# Execution order of the locations of one block (see the module docstring of interplab.core.sites)
BLOCK_SLOTS = {"block_in": 0, "ln1_in": 1, "ln1_out": 2, "q": 3, "k": 4, "v": 5, "rot": 6, "softmax_in": 7,
               "o_in": 8, "attn_outputs": 9, "attn_out_norm": 10, "ln2_in": 11, "ln2_out": 12, "down_in": 13,
               "mlp_out": 14, "block_out": 15}
GLOBAL_SLOTS = {"final_in": 0, "final_out": 1, "lm_head": 2}
SOURCE_KINDS = ("attn_rot_q", "attn_rot_k", "attn_scores")
_STATE = "__nnsight__"   # where nnsight 0.8 keeps a module's instrumentation (nnsight.intervention.source.STATE)


# ----------------------------------------------------------------------------------------------- accessors
def tensor_access(idx=None, heads=None):
    """A tensor (element `idx` of a tuple value), viewed per head when `heads` = (n, d_head)."""
    def get(val, stash):
        x = val[idx] if idx is not None and isinstance(val, tuple) else val
        return x if heads is None else x.reshape(*x.shape[:-1], heads[0], heads[1])

    def put(val, x, stash):
        tup = idx is not None and isinstance(val, tuple)
        old = val[idx] if tup else val
        new = x.reshape(old.shape) if heads is not None else x
        return (*val[:idx], new, *val[idx + 1:]) if tup else new
    return get, put


def slice_access(start, stop, heads):
    """Columns start:stop of the last axis (one of GPT-2's fused q | k | v), viewed per head."""
    def get(val, stash):
        x = val[..., start:stop]
        return x.reshape(*x.shape[:-1], heads[0], heads[1])

    def put(val, x, stash):
        import torch
        return torch.cat([val[..., :start], x.reshape(*x.shape[:-2], -1).to(val.dtype), val[..., stop:]], -1)
    return get, put


def rotated_access(i):
    """Element i of apply_rotary_pos_emb's (q, k), [b, heads, p, d_head], as [b, p, heads, d_head]."""
    def get(val, stash):
        return val[i].transpose(1, 2)

    def put(val, x, stash):
        return (*val[:i], x.transpose(1, 2), *val[i + 1:])
    return get, put


def in_place_access():
    """A tensor that other code also holds (resid_mid: the block's residual): written into itself."""
    def get(val, stash):
        return val

    def put(val, x, stash):
        if x is not val:
            val.copy_(x)
        return val
    return get, put


def scale_access(key, kind, eps, offset, weight, bias):
    """A norm's scale [b, p, 1] from its input: sqrt(mean(c^2) + eps), c the input (centred for LayerNorm), in float32
    at least, as TransformerLens's hook_scale. `put` keeps the input and stashes the norm's output re-computed with
    the edited scale (TransformerLens's formula for an edited hook_scale), which `stash_output` then writes."""
    def centred(x):
        import torch
        xf = x if x.dtype in (torch.float32, torch.float64) else x.float()
        return xf - xf.mean(-1, keepdim=True) if kind == "layer" else xf

    def get(val, stash):
        return (centred(val).pow(2).mean(-1, keepdim=True) + eps).sqrt()

    def put(val, s, stash):
        w = weight.to(val.device)
        out = centred(val) / s * ((1.0 + w) if offset else w)
        if bias is not None:
            out = out + bias.to(val.device)
        stash[key] = out.to(val.dtype)
        return val
    return get, put


def stash_output(key):
    """The norm's output replaced by what its scale part stashed (no accessor value of its own: get is None)."""
    def put(val, x, stash):
        return stash.pop(key) if key in stash else val
    return None, put


# ----------------------------------------------------------------------------------------------- locations
def locate(backend, site: Site) -> list[tuple]:
    """[(order key, envoy, chain, where, (get, put), needs_edits_only)] for one site: usually one location; a norm
    scale has two (its input, and its output when edited). `chain` are attributes read inside the trace."""
    p, L = backend.paths, site.layer
    kind = site.kind
    if L is None:
        final = get_module(backend.nn, p.final_norm)
        if kind == "final_norm_scale":
            return _scale_locations(backend, site, final, (L, "final_in"), (L, "final_out"))
        if kind == "final_norm":
            return [(_key(backend, L, "final_out"), final, (), "output", tensor_access(), False)]
        return [(_key(backend, L, "lm_head"), get_module(backend.nn, p.lm_head), (), "output", tensor_access(),
                 False)]
    block = backend.block(L)
    hq, hkv = (backend.n_heads, backend.d_head), (backend.n_kv_heads, backend.d_head)
    if kind == "resid_pre":
        return [(_key(backend, L, "block_in"), block, (), "input", tensor_access(), False)]
    if kind == "resid_post":
        return [(_key(backend, L, "block_out"), block, (), "output", tensor_access(idx=0), False)]
    if kind in ("ln1_scale", "ln2_scale"):
        n = kind[:3]
        return _scale_locations(backend, site, get_module(block, getattr(p, n)), (L, f"{n}_in"), (L, f"{n}_out"))
    if kind == "resid_mid":
        return [(_key(backend, L, "ln2_in"), get_module(block, p.ln2), (), "input", in_place_access(), False)]
    if kind in ("attn_q", "attn_k", "attn_v") or (kind in ("attn_rot_q", "attn_rot_k") and not p.rotary):
        i = "qkv".index(kind[-1])
        heads = hq if i == 0 else hkv
        if p.qkv is not None:  # one fused projection [q | k | v] (GPT-2's c_attn, Phi-3's qkv_proj)
            widths = [hq[0] * hq[1], hkv[0] * hkv[1], hkv[0] * hkv[1]]
            start = sum(widths[:i])
            return [(_key(backend, L, "q"), get_module(block, p.qkv), (), "output",
                     slice_access(start, start + widths[i], heads), False)]
        proj = (p.q_proj, p.k_proj, p.v_proj)[i]
        return [(_key(backend, L, "qkv"[i]), get_module(block, proj), (), "output", tensor_access(heads=heads),
                 False)]
    if kind in ("attn_rot_q", "attn_rot_k"):
        attn = get_module(block, p.attn)
        label = _op_label(backend, attn, "apply_rotary_pos_emb")
        return [(_key(backend, L, "rot"), attn, ("source", label), "output",
                 rotated_access(0 if kind == "attn_rot_q" else 1), False)]
    if kind == "attn_scores":
        attn = get_module(block, p.attn)
        return [(_key(backend, L, "softmax_in"), attn, _softmax_chain(backend, attn), "input", tensor_access(),
                 False)]
    if kind == "attn_z":
        return [(_key(backend, L, "o_in"), get_module(block, p.o_proj), (), "input", tensor_access(heads=hq), False)]
    if kind == "attn_out" and p.attn_out:
        return [(_key(backend, L, "attn_out_norm"), get_module(block, p.attn_out), (), "output", tensor_access(),
                 False)]
    if kind in ("attn_out", "attn_pattern"):
        return [(_key(backend, L, "attn_outputs"), get_module(block, p.attn), (), "output",
                 tensor_access(idx=0 if kind == "attn_out" else 1), False)]
    if kind == "mlp_hidden":
        return [(_key(backend, L, "down_in"), get_module(block, p.mlp_down), (), "input", tensor_access(), False)]
    if kind == "mlp_out":
        return [(_key(backend, L, "mlp_out"), get_module(block, p.mlp_out or p.mlp), (), "output", tensor_access(),
                 False)]
    raise SiteError(f"unsupported site {site}")  # pragma: no cover - parse_site guarantees the kind


def _key(backend, layer, slot: str) -> tuple[int, int]:
    if layer is None:
        return (backend.n_layers, GLOBAL_SLOTS[slot])
    return (layer, BLOCK_SLOTS[slot])


def _scale_locations(backend, site: Site, norm, in_slot, out_slot) -> list[tuple]:
    spec: NormSpec = norm_spec(norm._module)
    module = norm._module
    bias = getattr(module, "bias", None) if spec.kind == "layer" else None
    weight = module.weight.detach()
    key = site.name
    return [(_key(backend, *in_slot), norm, (), "input",
             scale_access(key, spec.kind, spec.eps, spec.offset, weight, None if bias is None else bias.detach()),
             False),
            (_key(backend, *out_slot), norm, (), "output", stash_output(key), True)]


# ------------------------------------------------------------------------------- inside the attention forward
def _op_label(backend, attn_env, prefix: str, last: bool = False) -> str:
    """The label nnsight's `.source` gives the call `prefix(...)` in the attention forward (installs `.source`
    on the module now, before the trace: a forward already running would not see it)."""
    names = source_of(backend, attn_env).names
    labels = [n for n in names if n.startswith(prefix + "_") and n[len(prefix) + 1:].isdigit()]
    if not labels:
        raise SiteError(f"{type(attn_env._module).__name__}.forward has no {prefix}(...) call for the nnsight "
                        "backend to read; use backend='bridge'")
    return labels[-1] if last else labels[0]


def _softmax_chain(backend, attn_env) -> tuple[str, ...]:
    """Attributes from the attention envoy to the softmax of its eager attention function: ("source",
    "attention_interface_1", "source", ..., "nn_functional_softmax_0"). The function is the one the module calls
    under eager attention (its modeling module's `eager_attention_forward`, possibly wrapped, e.g. by
    TransformerLens's Gemma hook wrapper, which calls the original: followed through its globals)."""
    module = attn_env._module
    if getattr(module.config, "reorder_and_upcast_attn", False):
        raise SiteError("attn_scores on the nnsight backend needs the plain eager attention path; this GPT-2 config "
                        "sets reorder_and_upcast_attn, which bypasses it: use backend='bridge'")
    fn = getattr(importlib.import_module(type(module).__module__), "eager_attention_forward", None)
    inner = _find_softmax(fn, 0) if fn is not None else None
    if inner is None:
        raise SiteError(f"cannot find the softmax of {type(module).__name__}'s eager attention for attn_scores on "
                        "the nnsight backend; use backend='bridge'")
    return ("source", _op_label(backend, attn_env, "attention_interface", last=True), "source", *inner)


def _find_softmax(fn, depth: int) -> tuple[str, ...] | None:
    from nnsight.intervention.source import SourceNotAvailable, compiled

    try:
        names = compiled(fn).names
    except (SourceNotAvailable, TypeError, OSError):
        return None
    hit = [n for n in names if n.startswith("nn_functional_softmax_") or n.startswith("torch_softmax_")]
    if hit:
        return (hit[0],)
    if depth >= 2:
        return None
    for label in names:  # a wrapper: follow the functions it calls by global name
        callee = getattr(fn, "__globals__", {}).get(label.rpartition("_")[0])
        if inspect.isfunction(callee) and callee is not fn:
            inner = _find_softmax(callee, depth + 1)
            if inner is not None:
                return (label, "source", *inner)
    return None


_INSTRUMENTED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def source_of(backend, env):
    """nnsight's `.source` of an envoy's module, instrumented for this forward only (`unsource` undoes it; a module
    the user sourced themselves stays so). Building the instrumented forward re-parses the module's decorators'
    source (~5 ms), so the first build is kept and re-installed on later forwards."""
    module = env._module
    state = module.__dict__.get(_STATE)
    if not getattr(state, "sourced", False):
        backend.sourced.add(module)
        cached = _INSTRUMENTED.get(module)
        if state is not None and cached is not None:
            state.body, state.compiled, state.sourced = cached[0], cached[1], True
    source = env.source
    state = module.__dict__[_STATE]
    _INSTRUMENTED[module] = (state.body, state.compiled)
    return source


def unsource(module) -> None:
    """Undo nnsight's `.source` instrumentation of `module` (nnsight 0.8 keeps it for the life of the module, and
    every later traced forward would pay for its per-operation handoffs)."""
    state = module.__dict__.get(_STATE)
    if state is not None and getattr(state, "sourced", False):
        state.body, state.sourced, state.compiled = state.original, False, None
