"""Canonical activation site names: one name per activation, the same for every backend.

Per block L, in execution order: `resid_pre.L, ln1_scale.L, attn_q.L, attn_k.L, attn_v.L, attn_rot_q.L,
attn_rot_k.L, attn_scores.L, attn_z.L, attn_pattern.L, attn_out.L, resid_mid.L, ln2_scale.L, mlp_hidden.L,
mlp_out.L, resid_post.L`; after the last block `final_norm_scale, final_norm, logits` (shapes and where each fires:
docs/hook_layer.md, "Site names"). Anything else is reached through the escape hatch `module:PATH` (a named
submodule of the Hugging Face model, e.g. `module:model.layers.3.mlp.act_fn`; `ModuleSite`).
Backends translate a `Site` into their own hook points (TransformerLens hook names, nnsight module paths)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from interplab.core.errors import SiteError

# Execution order inside a block: nnsight must read module inputs/outputs in the order they fire, and a forward
# stops early after the deepest site of interest.
LAYER_KINDS = ("resid_pre", "ln1_scale", "attn_q", "attn_k", "attn_v", "attn_rot_q", "attn_rot_k", "attn_scores",
               "attn_z", "attn_pattern", "attn_out", "resid_mid", "ln2_scale", "mlp_hidden", "mlp_out",
               "resid_post")
GLOBAL_KINDS = ("final_norm_scale", "final_norm", "logits")
SITE_KINDS = LAYER_KINDS + GLOBAL_KINDS
# [b, heads, q, k]: a key axis that grows during KV-cached decoding (captured per step as a list)
KEY_AXIS_KINDS = ("attn_scores", "attn_pattern")
# [b, p, heads, d_head]: per query head, or per KV head (GQA: n_kv_heads of them)
QUERY_HEAD_KINDS = ("attn_q", "attn_rot_q", "attn_z")
KV_HEAD_KINDS = ("attn_k", "attn_rot_k", "attn_v")
SCALE_KINDS = ("ln1_scale", "ln2_scale", "final_norm_scale")
MODULE_PREFIX = "module:"

_ORDER_IN_BLOCK = {k: i for i, k in enumerate(LAYER_KINDS)}
_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")


def kind_of(site: "str | Site") -> str:
    """The kind of a site name or Site ("resid_post" for "resid_post.3", "module" for "module:...")."""
    if isinstance(site, Site):
        return site.kind
    if site.startswith(MODULE_PREFIX):
        return "module"
    return site.rpartition(".")[0] or site


def has_key_axis(site: "str | Site") -> bool:
    """True for [b, heads, q, k] sites (attn_scores, attn_pattern): positions index the query axis (dim 2)."""
    return kind_of(site) in KEY_AXIS_KINDS


@dataclass(frozen=True, order=False)
class Site:
    kind: str
    layer: int | None = None

    @property
    def name(self) -> str:
        return self.kind if self.layer is None else f"{self.kind}.{self.layer}"

    def order_key(self, n_layers: int) -> tuple[int, int]:
        """Execution order: all of block L before block L+1; final_norm_scale, final_norm, logits after the last."""
        if self.layer is None:
            return (n_layers, GLOBAL_KINDS.index(self.kind))
        return (self.layer, _ORDER_IN_BLOCK[self.kind])

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, order=False)
class ModuleSite(Site):
    """The escape hatch: the output (io="output", its first element when the module returns a tuple) or the first
    input (io="input") of a named submodule of the Hugging Face model, e.g.
    `ModuleSite("model.layers.3.mlp.act_fn")` = `"module:model.layers.3.mlp.act_fn"` (`":input"` appended for the
    input). `path` is relative to `LabModel.hf_model`; `layer` is the block it lies in (the model fills it in), so a
    forward can still stop early after that block."""

    kind: str = "module"
    layer: int | None = None
    path: str = ""
    io: str = "output"

    def __init__(self, path: str, io: str = "output", layer: int | None = None):
        if not isinstance(path, str) or not _PATH.match(path):
            raise SiteError(f"module site path must be a dotted module path such as 'model.layers.3.mlp.act_fn' "
                            f"(see LabModel.module_paths()), got {path!r}")
        if io not in ("output", "input"):
            raise SiteError(f"module site io must be 'output' or 'input', got {io!r}")
        object.__setattr__(self, "kind", "module")
        object.__setattr__(self, "layer", layer)
        object.__setattr__(self, "path", path)
        object.__setattr__(self, "io", io)

    @property
    def name(self) -> str:
        return MODULE_PREFIX + self.path + (":input" if self.io == "input" else "")

    def order_key(self, n_layers: int) -> tuple[int, int]:
        """Fires somewhere inside its block (the exact step is the module's business): ordered with resid_post."""
        if self.layer is None:
            return (n_layers, len(GLOBAL_KINDS))
        return (self.layer, _ORDER_IN_BLOCK["resid_post"])

    def __eq__(self, other) -> bool:
        return isinstance(other, ModuleSite) and (self.path, self.io) == (other.path, other.io)

    def __hash__(self) -> int:
        return hash(("module", self.path, self.io))


def valid_sites(n_layers: int) -> list[str]:
    """Every valid canonical site name for a model with `n_layers` blocks (plus any `module:PATH`)."""
    return [f"{k}.{layer}" for layer in range(n_layers) for k in LAYER_KINDS] + list(GLOBAL_KINDS)


def _describe(n_layers: int) -> str:
    return (f"valid sites are {', '.join(k + '.L' for k in LAYER_KINDS)} with L in 0..{n_layers - 1}, "
            f"and {', '.join(GLOBAL_KINDS)}; any other module of the Hugging Face model is reachable as "
            "'module:PATH' (e.g. 'module:model.layers.0.mlp.act_fn'; model.module_paths() lists them)")


def _parse_module(name: str) -> ModuleSite:
    body = name[len(MODULE_PREFIX):]
    path, _, io = body.partition(":")
    return ModuleSite(path, io or "output")


def parse_site(name: "str | Site", n_layers: int) -> Site:
    """Parse and validate a site name against a model with `n_layers` blocks; `SiteError` says what is valid."""
    if isinstance(name, ModuleSite):
        return name
    if isinstance(name, Site):
        name = name.name
    if not isinstance(name, str):
        raise SiteError(f"site must be a string like 'resid_post.3', got {type(name).__name__} {name!r}; "
                        + _describe(n_layers))
    if name.startswith(MODULE_PREFIX):
        return _parse_module(name)
    if name in GLOBAL_KINDS:
        return Site(name)
    kind, dot, layer_s = name.rpartition(".")
    if not dot or kind not in LAYER_KINDS:
        hint = ""
        if name in LAYER_KINDS:
            hint = f" ('{name}' needs a layer index, e.g. '{name}.0')"
        elif name.startswith(("blocks.", "model.", "transformer.")):
            hint = (" (this looks like a backend hook name or a module path; interplab uses canonical site names, "
                    f"or 'module:{name}' for a module of the Hugging Face model)")
        raise SiteError(f"unknown site {name!r}{hint}; " + _describe(n_layers))
    try:
        layer = int(layer_s)
    except ValueError:
        raise SiteError(f"site {name!r} has a non-integer layer {layer_s!r}; " + _describe(n_layers)) from None
    if layer < 0:
        layer += n_layers  # python-style negative layers: resid_post.-1 is the last block
    if not 0 <= layer < n_layers:
        raise SiteError(f"site {name!r}: layer {layer_s} is out of range for a model with {n_layers} layers; "
                        + _describe(n_layers))
    return Site(kind, layer)


def parse_sites(names, n_layers: int) -> list[Site]:
    if isinstance(names, (str, Site)):
        names = [names]
    out: list[Site] = []
    for n in names:
        s = parse_site(n, n_layers)
        if s not in out:
            out.append(s)
    return out
